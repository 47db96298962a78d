"""The data-swap pairs: white-box evidence beside the black-box attack. Per method, two runs
identical in everything (seed, class split, initial weights, training seed) but the audited
task's training data — each trains t on another class-balanced half of D^t, the same classes
and the same number of examples (:func:`~pall_avalanche.data.tasks.half_of_task`) — and the
strategy's whole state right after t's unlearning request
(:class:`~pall_avalanche.audit.probes.StateProbe`: model, strategy attributes, plugins'
state; the request log aside). An unlearning that leaves nothing of D^t leaves the two states
identical, bit for bit; otherwise the entries that differ are counted and named by the part
of the state that holds them (:func:`channel`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from pall_avalanche.audit.oracle import oracle_sequence
from pall_avalanche.audit.probes import StateProbe, decode_state
from pall_avalanche.requests import RequestSequence
from pall_avalanche.runs.batch import run_specs
from pall_avalanche.runs.spec import RunSpec, plan
from pall_avalanche.runs.wandb_logging import default_group

__all__ = ["SWAP_HALVES", "SWAP_TRAIN_SEED_OFFSET", "channel", "run_swapped", "swap_rows",
           "swap_specs"]

#: Both runs of a pair train with training seed ``seed + SWAP_TRAIN_SEED_OFFSET`` (records of
#: their own, apart from the other experiments').
SWAP_TRAIN_SEED_OFFSET = 300_000
#: The two halves of D^t the pair's runs train t on (``shadow_seed``).
SWAP_HALVES = (0, 1)


def swap_specs(methods: Sequence[str], config: Mapping[str, Any], *,
               requests: RequestSequence, seed: int) -> list[RunSpec]:
    """The pairs' runs: per method, one run per half of :data:`SWAP_HALVES`."""
    _, unlearned = oracle_sequence(requests)
    return [spec for half in SWAP_HALVES
            for spec in plan(methods, [seed], config, requests=requests,
                             overrides=[("shadow_task", unlearned[0]), ("shadow_seed", half)],
                             train_seed_offset=SWAP_TRAIN_SEED_OFFSET,
                             modules=[StateProbe.__module__])]


def _unlearning_index(requests: RequestSequence) -> int:
    """The index of the audited task's first unlearning request."""
    _, unlearned = oracle_sequence(requests)
    return next(i for i, r in enumerate(requests) if r.is_unlearn and r.task == unlearned[0])


def run_swapped(methods: Sequence[str], config: Mapping[str, Any], out_dir: str | Path, *,
                requests: RequestSequence, seed: int = 0, **options: Any) -> list[dict]:
    """Run (or reuse) the pairs under ``out_dir/swapped`` (``options`` as
    :func:`~pall_avalanche.audit.shadows.run_shadows`' ; a diverged run is left out)."""
    options = {k: v for k, v in options.items() if k != "checkpoints"}
    return run_specs(swap_specs(methods, config, requests=requests, seed=seed),
                     Path(out_dir) / "swapped", group=default_group(config), checkpoints=False,
                     probe=partial(StateProbe, _unlearning_index(requests)), skip_diverged=True,
                     **options)


def channel(path: str) -> str:
    """The part of a strategy's state a leaf's path belongs to, in words: a subnetwork's
    masks (stored bit-packed: an entry is a byte of 8 mask bits), the model's weights, a
    buffer's samples, labels or stored logits, a method's retraining ledger, or the
    strategy's or a plugin's named attribute."""
    parts = path.split("/")
    if parts[0] == "model":
        return "masks (packed bytes)" if "_extra_state" in path else "weights"
    if parts[0] == "plugins" and "EpisodicMemory" in parts[1] and parts[2] == "buffers":
        what = {"0": "samples", "1": "labels", "2": "stored logits"}.get(
            parts[4] if len(parts) > 4 else "", "entries")
        return f"buffer {what}"
    if parts[0] == "strategy" and parts[1].startswith("ledger"):
        return "retraining ledger"
    if parts[0] == "plugins":
        return f"plugin {parts[1].rsplit('.', 1)[-1]}: {'/'.join(parts[2:3])}"
    return f"{parts[0]} {parts[1]}" if len(parts) > 1 else parts[0]


def _bits(x: np.ndarray) -> np.ndarray:
    """Every entry of ``x`` as a row of its bytes (compared bit for bit)."""
    return np.ascontiguousarray(x).reshape(-1).view(np.uint8).reshape(x.size, -1)


def _differences(a: Mapping[str, Any], b: Mapping[str, Any]) -> Counter:
    """Per channel, how many entries of two decoded states differ, bit for bit (a leaf whose
    shape or type differs, or that only one state has: all its entries; a non-tensor leaf:
    one entry)."""
    out: Counter = Counter()
    for path in sorted(set(a) | set(b)):
        x, y = a.get(path), b.get(path)
        arrays = isinstance(x, np.ndarray), isinstance(y, np.ndarray)
        if all(arrays) and x.shape == y.shape and x.dtype == y.dtype:
            differ = int((_bits(x) != _bits(y)).any(axis=1).sum()) if x.size else 0
        elif any(arrays):
            differ = max(np.size(v) if isinstance(v, np.ndarray) else 1
                         for v in (x, y) if v is not None)
        else:
            differ = int(x != y)
        if differ:
            out[channel(path)] += differ
    return out


def swap_rows(records: Sequence[Mapping[str, Any]], methods: Sequence[str]
              ) -> dict[str, dict[str, Any]]:
    """Per method with both runs of its pair: ``swap_entries`` (how many entries of the state
    differ after t's unlearning request; 0: identical bit for bit) and ``swap_channels``
    (channel → entries, largest first, ties by name)."""
    out = {}
    for method in methods:
        states = {r["config"]["shadow_seed"]: r["probe"]["state"] for r in records
                  if r["method"] == method and r["probe"].get("state") is not None}
        if set(SWAP_HALVES) <= set(states):
            found = _differences(*(decode_state(states[h]) for h in SWAP_HALVES))
            out[method] = {"swap_entries": sum(found.values()),
                           "swap_channels": dict(sorted(found.items(),
                                                        key=lambda kv: (-kv[1], kv[0])))}
    return out
