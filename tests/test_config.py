"""The configuration (pall_avalanche.config): YAML numbers, the one way to a benchmark's
configuration, a configuration file completed by its benchmark's, and one-line refusals."""

from __future__ import annotations

import pytest

from pall_avalanche.catalog import BENCHMARK_INFO, register_benchmark
from pall_avalanche.config import (
    CONFIG_DIR,
    check_run_config,
    check_setting,
    for_benchmark,
    load_config,
    parse_override,
    with_defaults,
)


def test_numbers_in_exponent_notation_are_numbers(tmp_path):
    # PyYAML (YAML 1.1) reads "1e-3" as a string; configurations and --set read it as a number
    assert parse_override("lr=1e-3") == ("lr", 0.001)
    assert parse_override("weight_decay=5E-4") == ("weight_decay", 0.0005)
    assert parse_override("buffer_selection=1e3x") == ("buffer_selection", "1e3x")
    check_setting("lr", parse_override("lr=1e-3")[1], "--set lr=1e-3")
    assert isinstance(parse_override("epochs=1e1")[1], float)   # refused for an int key
    with pytest.raises(ValueError, match="must be an integer >= 1, got 10.0"):
        check_setting("epochs", parse_override("epochs=1e1")[1], "--set epochs=1e1")
    config = tmp_path / "c.yaml"
    config.write_text("weight_decay: 5e-4\nmethods:\n  er: {lr: 1e-3}\n")
    assert load_config(config) == {"weight_decay": 0.0005, "methods": {"er": {"lr": 0.001}}}


def test_for_benchmark_reads_a_shipped_file_or_completes_a_registered_benchmark(tmp_path):
    assert for_benchmark("digits") == load_config(CONFIG_DIR / "digits.yaml")
    assert for_benchmark("cifar10")["lr"] == 0.01   # the paper's S-CIFAR10 setting, as shipped
    register_benchmark("digits_six", "pall_avalanche.data:build_benchmark", n_classes=12,
                       default_n_tasks=6, config={"epochs": 3})
    try:
        own = for_benchmark("digits_six")
        # the digits file's keys, then the registration's task count and configuration
        assert own == {**load_config(CONFIG_DIR / "digits.yaml"), "n_tasks": 6, "epochs": 3,
                       "benchmark": "digits_six"}
        shipped = tmp_path / "digits_six.yaml"
        shipped.write_text("benchmark: digits\nepochs: 7\n")
        assert for_benchmark("digits_six", tmp_path) == {"benchmark": "digits", "epochs": 7}
    finally:
        BENCHMARK_INFO.pop("digits_six")
    with pytest.raises(ValueError, match="--benchmark mnist: unknown benchmark; valid: digits"):
        for_benchmark("mnist")


def test_a_configuration_file_takes_what_it_leaves_out_from_its_benchmark():
    mine = {"epochs": 2, "methods": {"gem": {"memory_strength": 0.7}, "er": {"lr": 0.5}}}
    whole = with_defaults(mine, "cifar10")
    assert whole["epochs"] == 2 and whole["batch_size"] == for_benchmark("cifar10")["batch_size"]
    # per method, the file's keys win and the benchmark's other keys stay (cifar10.yaml: gem
    # and er have lr 0.001)
    assert whole["methods"]["gem"] == {"lr": 0.001, "memory_strength": 0.7}
    assert whole["methods"]["er"] == {"lr": 0.5}


def test_a_buffer_smaller_than_a_task_s_classes_is_refused_with_the_smallest_valid_size():
    config = {**for_benchmark("digits"), "buffer_size": 8}
    with pytest.raises(ValueError, match=r"buffer_size=8 is invalid for 'pall': it gives 1 "
                                         r"samples per task over 5 tasks, fewer than the 2 "
                                         r"classes of a task; use buffer_size >= 10"):
        check_run_config(config, "pall")
