"""The contract of pall_avalanche.check_method holds for every registered method (built-in or
a plugin's), and a method that claims exactness without keeping it is reported as failing."""

from __future__ import annotations

from pathlib import Path

import pytest

from pall_avalanche.catalog import METHOD_INFO
from pall_avalanche.check_method import check_method, cli
from pall_avalanche.extensions import load_extensions

PLUGIN = Path(__file__).resolve().parents[2] / "examples" / "l2_init_plugin.py"
load_extensions([str(PLUGIN)])


def names(checks) -> dict[str, bool]:
    return {c.name: c.passed for c in checks}


@pytest.mark.parametrize("method", list(METHOD_INFO))
def test_every_registered_method_keeps_the_contract(method):
    checks = check_method(method)
    expected = {"keys", "learns", "lifecycle", "resume", "optimizer"}
    if METHOD_INFO[method].exact:
        expected.add("exact")
    assert expected <= set(names(checks)), checks
    assert all(c.passed for c in checks), "\n".join(map(str, checks))


def check_registered(tmp_path, capsys, name: str, registration: str):
    """``check_method NAME --plugin FILE`` for a method ``registration`` registers (its
    arguments after the name), then forgotten: (exit code, stdout, stderr)."""
    plugin = tmp_path / f"{name}.py"
    plugin.write_text("from pall_avalanche import Key, Method, register_method\n"
                      f"register_method(Method('{name}', {registration}))\n")
    try:
        with pytest.raises(SystemExit) as done:
            cli([name, "--plugin", str(plugin)])
    finally:
        METHOD_INFO.pop(name, None)
    out, err = capsys.readouterr()
    return done.value.code, out, err


def test_a_method_claiming_exactness_it_lacks_is_reported(tmp_path, capsys):
    # Sequential's unlearning changes nothing: registered exact=True, it must fail "exact"
    code, out, err = check_registered(
        tmp_path, capsys, "claims_exact",
        "'pall_avalanche.strategies.sequential:Sequential', exact=True")
    assert code == 1
    assert "FAIL exact: unlearned task 2 at" in out and "ABOVE" in out
    assert "ok   learns" in out and "ok   resume" in out
    assert err.strip() == "check_method: error: method 'claims_exact' fails the contract: exact"


def test_a_declared_key_the_constructor_does_not_take_is_reported(tmp_path, capsys):
    # PALL's keys plus one its constructor has no parameter for: the "keys" row names it
    code, out, err = check_registered(
        tmp_path, capsys, "pall_bad_keys",
        "'pall_avalanche.strategies.pall:PALL', exact=True, keys={'alpha': Key(0.2, 'α'), "
        "'temperature': Key(2.0, 'a key PALL does not take')}")
    assert code == 1
    assert "FAIL keys: declared but not taken by PALL(...): temperature" in out
    assert "fails the contract:" in err and "keys" in err


def test_constructor_keywords_follow_kwargs_up_the_bases():
    from pall_avalanche.check_method.checks import constructor_keywords

    class Base:
        def __init__(self, *, a, b=1):
            pass

    class Middle(Base):
        def __init__(self, *, c, **kwargs):
            super().__init__(**kwargs)

    class Closed(Middle):
        def __init__(self, d):   # takes no **kwargs: its bases' keywords are not reachable
            super().__init__(c=d, a=d)

    assert constructor_keywords(Middle) == {"a", "b", "c"}
    assert constructor_keywords(Closed) == {"d"}
