"""A malformed sweep file is refused in one line naming it (exit 2); none gives a
traceback, an empty grid or a broken Slurm script."""

from __future__ import annotations

import pytest

from pall_avalanche.sweeps import cli

GOOD = "program: benchmarks/table1.py\nmethod: grid\nparameters:\n  seeds:\n    values: [0, 1]\n"

CASES = {
    "not a mapping": ("- 1\n- 2\n", "a sweep file is a YAML mapping, got list"),
    "not YAML": ("program: [unclosed\n", "not valid YAML at line"),
    "no program": ("method: grid\nparameters:\n  seeds:\n    values: [0]\n",
                   "'program' must name the script"),
    "no parameters": ("program: benchmarks/table1.py\nmethod: grid\n",
                      "'parameters' must map each parameter"),
    "empty values": (GOOD.replace("[0, 1]", "[]"), "parameter 'seeds': 'values' must be a "
                                                   "non-empty list"),
    "values not a list": (GOOD.replace("[0, 1]", "5"), "'values' must be a non-empty list"),
    "values of mappings": (GOOD.replace("[0, 1]", "[{a: 1}]"), "'values' must be a non-empty "
                                                               "list of numbers or strings"),
    "command a string": (GOOD + "command: python run.py\n", "'command' must be a list of "
                                                            "strings"),
    "random sweep": (GOOD.replace("grid", "random"), "only grid sweeps"),
    "alias bomb": ("a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 10)}]\n"
        for i in range(8)), "more than 100000 values"),
    "not UTF-8": (b"program: caf\xe9\n", "not UTF-8 text"),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("action", [[], ["--slurm", "{tmp}/array.sh"], ["--run"]])
def test_a_malformed_sweep_file_is_refused_in_one_line(tmp_path, capsys, case, action):
    text, expected = CASES[case]
    sweep = tmp_path / "sweep.yaml"
    sweep.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(SystemExit) as exit_info:
        cli([str(sweep), *(a.replace("{tmp}", str(tmp_path)) for a in action)])
    out = capsys.readouterr()
    err = out.err.strip().splitlines()
    assert exit_info.value.code == 2 and len(err) == 1 and out.out == "", err
    assert str(sweep) in err[0] and expected in err[0], err
    assert not (tmp_path / "array.sh").exists()


def test_a_good_sweep_file_still_expands(tmp_path, capsys):
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(GOOD)
    with pytest.raises(SystemExit) as exit_info:
        cli([str(sweep)])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.splitlines() == [
        "python benchmarks/table1.py --seeds=0", "python benchmarks/table1.py --seeds=1"]
