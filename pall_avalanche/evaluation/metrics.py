"""The paper's metrics as pure functions of (accuracy matrix, request sequence).

``accuracy[i, t]`` is the test accuracy (percent) on task ``t`` after request ``i`` (0-based
rows; the paper's a_{i+1,t}). With T learning and N_u unlearning requests
(docs/fidelity.md, "Metrics"):

- A_l   = mean over t ∈ Ω_r of a_{r,t}                       (None if Ω_r is empty)
- A_u   = mean over unlearned tasks of a_{r,t}               (None if N_u = 0)
- F_l   = 1/(T-1) Σ_{learning i ≥ 2} mean_{t∈Ω_{i-1}} (a_{i-1,t} - a_{i,t})   (None if T < 2)
- F_u   = 1/N_u   Σ_{unlearning i}   mean_{t∈Ω_i}     (a_{i-1,t} - a_{i,t})   (None if N_u = 0)
- F_u^max = max over unlearning i and t ∈ Ω_i of (a_{i-1,t} - a_{i,t})         (None if N_u = 0)

A request whose set (Ω_{i-1} for learning, Ω_i for unlearning) is empty contributes 0 and the
denominators stay T-1 and N_u; F_u^max is 0 when N_u > 0 but every such set is empty.

A request that makes a task permanent (the CLPU protocol) trains on learning data when the
method consolidates the task (CLPU-DER++ merges its side network): its drop over Ω_{i-1}
is added to F_l's sum like a learning request's, the denominator staying T-1 (the learning
requests), so consolidating is charged as learning is; it is no unlearning request.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from pall_avalanche.requests import RequestKind, RequestSequence

__all__ = ["METRIC_NAMES", "compute_metrics", "model_size_mb", "relapse", "relapse_summary",
           "summarize_metrics", "t_interval"]

#: The per-run metrics, as records and reports name them.
METRIC_NAMES = ("A_l", "A_u", "F_l", "F_u", "F_u_max")


def _mean(values: Sequence[float]) -> float:
    return float(sum(values) / len(values))


def compute_metrics(accuracy: np.ndarray | Sequence[Sequence[float]],
                    requests: RequestSequence) -> dict[str, float | None]:
    """A_l, A_u, F_l, F_u and F_u_max (percent; ``None`` where undefined) of one run."""
    acc = np.asarray(accuracy, dtype=np.float64)
    if acc.shape != (len(requests), requests.n_tasks):
        raise ValueError(
            f"accuracy matrix has shape {acc.shape}; expected (number of requests, number of "
            f"tasks) = ({len(requests)}, {requests.n_tasks})"
        )
    active = requests.active_sets()
    final = sorted(active[-1])
    unlearned = requests.unlearned_tasks
    n_learn = len(requests.learned_tasks)

    learn_terms, unlearn_terms, unlearn_drops = [], [], []
    for i in range(1, len(requests)):
        drop = acc[i - 1] - acc[i]
        if not requests[i].is_unlearn:
            tasks = sorted(active[i - 1])
            learn_terms.append(_mean([drop[t] for t in tasks]) if tasks else 0.0)
        else:
            tasks = sorted(active[i])
            unlearn_terms.append(_mean([drop[t] for t in tasks]) if tasks else 0.0)
            unlearn_drops.extend(float(drop[t]) for t in tasks)

    n_unlearn = len(unlearned)
    return {
        "A_l": _mean([acc[-1, t] for t in final]) if final else None,
        "A_u": _mean([acc[-1, t] for t in unlearned]) if n_unlearn else None,
        "F_l": sum(learn_terms) / (n_learn - 1) if n_learn >= 2 else None,
        "F_u": sum(unlearn_terms) / n_unlearn if n_unlearn else None,
        "F_u_max": (max(unlearn_drops) if unlearn_drops else 0.0) if n_unlearn else None,
    }


def summarize_metrics(runs: Iterable[Mapping[str, float | None]]) -> dict[str, float | None]:
    """Across seeds: ``<name>_mean`` and ``<name>_std`` (sample std, ddof=1) of every metric,
    plus ``A_l_min``, the worst seed's A_l (Table A8; its F_u^max is ``F_u_max_mean``, the
    mean of the seeds' own worst drops). Undefined values are skipped; a statistic with no
    defined value is ``None``."""
    runs = list(runs)
    out: dict[str, float | None] = {"n_runs": len(runs)}
    for name in METRIC_NAMES:
        values = [float(r[name]) for r in runs if r.get(name) is not None]
        out[f"{name}_mean"] = _mean(values) if values else None
        out[f"{name}_std"] = float(np.std(values, ddof=1)) if len(values) > 1 else None
        if name == "A_l":
            out["A_l_min"] = min(values) if values else None
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in out.items()}


def model_size_mb(n_float_params: int, n_mask_bits: int = 0) -> float:
    """Inference model size in MB (2^20 bytes), as the paper counts it: 4 bytes per float
    parameter plus 1 bit per maskable entry per stored mask. ResNet-18 (11,164,352 floats)
    with 5 masks over all its entries gives 49.24 MB; alone 42.59 MB."""
    if n_float_params < 0 or n_mask_bits < 0:
        raise ValueError(
            f"parameter and mask-bit counts must be non-negative, got {n_float_params} and "
            f"{n_mask_bits}"
        )
    return (4 * n_float_params + n_mask_bits / 8) / 2**20


def relapse(accuracy: np.ndarray | Sequence[Sequence[float]],
            requests: RequestSequence | Sequence) -> list[dict]:
    """Relapse after each unlearning request: how far the unlearned task's accuracy climbs
    back while later requests (which never learn it) are served.

    For unlearning request i of task t, rise = max over later rows j > i of
    ``accuracy[j][t] - accuracy[i][t]``, clipped below at 0; the rows stop before a later
    request that learns t again (a fresh learning is not a relapse). One
    ``{"request": i, "task": t, "rise": value}`` per unlearning request, in order, with
    ``rise`` None when no such later row exists (e.g. the last request).

    :param accuracy: the r × T accuracy matrix (percent), row i = after request i.
    :param requests: the r requests, objects with ``.kind`` ("learn"/"unlearn") and ``.task``.
    """
    acc = np.asarray(accuracy, dtype=np.float64)
    requests = list(requests)
    if acc.ndim != 2 or acc.shape[0] != len(requests):
        raise ValueError(
            f"accuracy matrix has shape {acc.shape}; expected one row per request "
            f"({len(requests)} requests)"
        )
    out = []
    for i, r in enumerate(requests):
        if r.kind != RequestKind.UNLEARN:
            continue
        t = int(r.task)
        if not 0 <= t < acc.shape[1]:
            raise ValueError(f"request {i} names task {t}; the matrix has {acc.shape[1]} tasks")
        rows = []
        for j in range(i + 1, len(requests)):
            if requests[j].kind == RequestKind.LEARN and int(requests[j].task) == t:
                break
            rows.append(j)
        rise = max(0.0, float(max(acc[j, t] for j in rows) - acc[i, t])) if rows else None
        out.append({"request": i, "task": t, "rise": rise})
    return out


def relapse_summary(accuracy: np.ndarray | Sequence[Sequence[float]],
                    requests: RequestSequence | Sequence) -> tuple[float | None, float | None]:
    """(mean, max) of the defined rises of :func:`relapse`; (None, None) if none is defined."""
    rises = [r["rise"] for r in relapse(accuracy, requests) if r["rise"] is not None]
    if not rises:
        return None, None
    return _mean(rises), float(max(rises))


def t_interval(values: Sequence[float], level: float = 0.95) -> tuple[float, float, float]:
    """(mean, low, high): the mean of ``values`` with its two-sided Student-t confidence
    interval (n − 1 degrees of freedom), the one interval of a mean over seeds or runs that the
    reports, the field table and the audit print.

    :param values: one value per seed or run (at least two).
    :param level: confidence level.
    :raises ValueError: fewer than two values.
    """
    values = np.asarray(values, dtype=float)
    if len(values) < 2:
        raise ValueError(f"a t-interval needs at least 2 values, got {len(values)}")
    from scipy import stats  # scipy: only where an interval is computed

    mean = float(values.mean())
    half = float(stats.t.ppf(0.5 + level / 2, len(values) - 1)
                 * values.std(ddof=1) / math.sqrt(len(values)))
    return mean, mean - half, mean + half
