"""The contract of pall_avalanche.check_method holds for every registered method (built-in or
a plugin's), and a method that claims exactness without keeping it is reported as failing."""

from __future__ import annotations

from pathlib import Path

import pytest

from pall_avalanche.catalog import METHOD_INFO
from pall_avalanche.check_method import check_method, cli
from pall_avalanche.extensions import load_plugins

PLUGIN = Path(__file__).resolve().parents[2] / "examples" / "l2_init_plugin.py"
load_plugins([str(PLUGIN)])


def names(checks) -> dict[str, bool]:
    return {c.name: c.passed for c in checks}


@pytest.mark.parametrize("method", list(METHOD_INFO))
def test_every_registered_method_keeps_the_contract(method):
    checks = check_method(method)
    expected = {"learns", "lifecycle", "resume", "optimizer"}
    if METHOD_INFO[method].exact:
        expected.add("exact")
    assert expected <= set(names(checks)), checks
    assert all(c.passed for c in checks), "\n".join(map(str, checks))


def test_a_method_claiming_exactness_it_lacks_is_reported(tmp_path, capsys):
    # Sequential's unlearning changes nothing: registered exact=True, it must fail "exact"
    plugin = tmp_path / "false_claim.py"
    plugin.write_text("from pall_avalanche import register_method\n"
                      "register_method('claims_exact', "
                      "'pall_avalanche.strategies.sequential:Sequential', exact=True)\n")
    with pytest.raises(SystemExit) as done:
        cli(["claims_exact", "--plugin", str(plugin)])
    out, err = capsys.readouterr()
    assert done.value.code == 1
    assert "FAIL exact: unlearned task 2 at" in out and "ABOVE" in out
    assert "ok   learns" in out and "ok   resume" in out
    assert err.strip() == "check_method: error: method 'claims_exact' fails the contract: exact"
