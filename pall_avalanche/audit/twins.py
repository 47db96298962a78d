"""Runs the audit's variants share with the method they vary: a leaky PALL variant
(:mod:`pall_avalanche.strategies.leaky`) differs from PALL, and a positive control or leaky
variant of :mod:`pall_avalanche.strategies.controls` from Independent or Sequential, in
unlearning only, so its runs on a sequence without unlearning requests (the oracle roles) are
that method's, run once."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from pall_avalanche.catalog import METHOD_INFO
from pall_avalanche.runs.spec import RunSpec
from pall_avalanche.strategies.controls import LeakyIndependent, LeakySequential
from pall_avalanche.strategies.leaky import LeakyPALL

__all__ = ["oracle_twin", "run_sharing_twins", "runs_needed"]


#: The variants' strategies (module:class) → the method each differs from in unlearning only
#: (it constructs and learns drawing the same random numbers).
_VARIED = {f"{cls.__module__}:{cls.__name__}": method
           for cls, method in ((LeakyPALL, "pall"), (LeakyIndependent, "independent"),
                               (LeakySequential, "sequential"))}


def oracle_twin(spec: RunSpec) -> RunSpec:
    """The run an oracle-role run (a sequence without unlearning requests) of an audit
    variant equals: the varied method's with the same configuration, seed, requests and
    training seed. Any other spec is its own twin."""
    info = METHOD_INFO[spec.method]
    method = _VARIED.get(info.where)
    if method is None:
        return spec
    keys = METHOD_INFO[method].keys
    config = {k: v for k, v in spec.config.items() if k in keys or k not in info.keys}
    return RunSpec(method, spec.seed, config, spec.requests, spec.train_seed, spec.modules)


def run_sharing_twins(specs: Sequence[RunSpec],
                      run: Callable[[list[RunSpec]], list[dict]]) -> list[dict]:
    """``run(specs)`` for a role without unlearning requests, each leaky variant's run taken
    from its :func:`oracle_twin` (each twin run once; its record copied under the variant's
    name). A run left out by ``run`` (diverged) is left out for its variants too."""
    twins = [oracle_twin(spec) for spec in specs]
    records = run(list(dict.fromkeys(twins)))
    found = {(r["method"], r["seed"], r["config_hash"]): r for r in records}
    out = []
    for spec, twin in zip(specs, twins, strict=True):
        record = found.get((twin.method, twin.seed, twin.hash))
        if record is not None:
            out.append(record if twin == spec else {**record, "method": spec.method})
    return out


def runs_needed(specs: Mapping[str, Sequence[RunSpec]]) -> int:
    """How many runs the roles ``specs`` (role → its runs) take: every run of the role with
    the unlearning request (``"unlearned"``), each distinct :func:`oracle_twin` of the
    others (:func:`run_sharing_twins`)."""
    return sum(len(runs) if role == "unlearned" else len(dict.fromkeys(map(oracle_twin, runs)))
               for role, runs in specs.items())
