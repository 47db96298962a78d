"""Run configurations: YAML files of hyper-parameters with command-line overrides.

A configuration is a flat mapping of run keys (benchmark, model, epochs, lr, ...) and method
keys (``alpha``: every method that declares it) plus an optional ``methods`` section whose
entries override them for one method (e.g. the paper's learning rate 0.001 for ER on CIFAR).
:func:`resolve_method_config` gives the flat, complete configuration of one method (the run
keys and the keys it declares); that is what a result record stores.

Every key is known (:data:`CONFIG_KEYS`: the run keys' type, range and meaning; the keys a
method declares, :func:`method_keys`): an unknown key, a value of the wrong type or out of
range is refused with one line naming where it came from (the file,
``--set KEY=VALUE`` or a flag), the bad value and what is valid (:func:`check_setting`,
:func:`check_config`, :func:`check_run_config`), before anything is trained.
"""

from pall_avalanche.config.keys import (
    AUTO_MIN_RUNS,
    CONFIG_KEYS,
    CPU_RUN_THREADS,
    MAX_SEED,
    REQUIRED_KEYS,
    KeySpec,
    check_config,
    check_setting,
    method_keys,
)
from pall_avalanche.config.loading import (
    CONFIG_DIR,
    LOCATION_KEYS,
    apply_overrides,
    check_run_config,
    config_hash,
    for_benchmark,
    load_config,
    load_yaml_file,
    parse_override,
    resolve_method_config,
    with_defaults,
)

__all__ = [
    "AUTO_MIN_RUNS",
    "CPU_RUN_THREADS",
    "CONFIG_DIR",
    "CONFIG_KEYS",
    "LOCATION_KEYS",
    "MAX_SEED",
    "REQUIRED_KEYS",
    "KeySpec",
    "apply_overrides",
    "check_config",
    "check_run_config",
    "check_setting",
    "config_hash",
    "for_benchmark",
    "load_config",
    "load_yaml_file",
    "method_keys",
    "parse_override",
    "resolve_method_config",
    "with_defaults",
]
