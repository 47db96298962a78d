"""Aggregation, torch-free: result records → frames. :func:`summary_frame` groups records
(by method, sweep point, any key) and gives mean, std and worst cases of every metric, the
strategy's per-request statistics, timings, model size and the records whose learning check
failed (:func:`record_failed_learning`); :func:`table1_frame` is its Table 1 view (PALL once per α);
:func:`load_records` reads every record under results folders."""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from pall_avalanche.catalog import ABLATION_METHODS, METHOD_INFO, TABLE1_METHODS, method_label
from pall_avalanche.config import config_hash
from pall_avalanche.evaluation.metrics import METRIC_NAMES, summarize_metrics
from pall_avalanche.files import CorruptFileError, RunWarning, load_record
from pall_avalanche.requests import RequestKind

#: The mark of a row with records whose learning check failed: ``†k/n`` (:func:`failed_mark`).
FAILED_MARK = "†"


def failed_mark(failed: int, n: int) -> str:
    """``"†k/n"``: ``failed`` of the ``n`` records of a row failed a learning check; ``""``
    when none did."""
    return f"{FAILED_MARK}{int(failed)}/{int(n)}" if failed else ""


#: Per-unlearning-request statistics a strategy may store (PALL: Table A2).
STAT_NAMES = ("redrawn", "retrained", "retrained_fraction", "retrained_mean_abs_change",
              "retrained_mean_abs_change_from_learned")


_TIMINGS = ("learn_seconds_per_epoch", "unlearn_seconds")


#: The order of Table 1's rows: its methods, the ablations, then any other registered method.
TABLE1_ORDER = tuple(dict.fromkeys([*TABLE1_METHODS, *ABLATION_METHODS, *METHOD_INFO]))


def _mean_std(values: Sequence[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    return float(np.mean(values)), (float(np.std(values, ddof=1)) if len(values) > 1 else None)


def record_failed_learning(record: Mapping) -> bool:
    """Whether a learning request of ``record`` left its task at chance (a ``failed`` entry of
    its ``learning_checks``)."""
    return any(check.get("failed") for check in record.get("learning_checks") or ())


def _key(record: Mapping, name: str) -> Any:
    """A record's field, else its configuration's key (``n_unlearn``, ``alpha`` ...)."""
    return record[name] if name in record else record["config"].get(name)


def summary_frame(records: Iterable[dict], by: Sequence[str] = ("method",), *,
                  extra: Mapping[str, Callable[[dict], float | None]] | None = None
                  ) -> pd.DataFrame:
    """One row per group of records (``by``: record fields or configuration keys), in order
    of first appearance: ``label``, ``exact``, ``seeds``, ``learning_failed`` (the
    records failing a learning check: :func:`record_failed_learning`), ``<metric>_mean/_std``
    of every metric, ``A_l_min`` (the worst seed's A_l), ``<stat>_mean/_std``
    of the strategy's per-request unlearning statistics (pooled over requests and seeds),
    ``<timing>_mean/_std`` and the largest inference ``model_size_mb``.

    :param records: result records (as written by the runner, optionally with ``point``).
    :param by: the grouping keys; they become the first columns.
    :param extra: more per-record values to aggregate, name → function of a record
        (``None`` skips the record); gives ``<name>_mean/_std``.
    """
    groups: dict[tuple, list[dict]] = {}
    for record in records:
        groups.setdefault(tuple(_key(record, k) for k in by), []).append(record)
    rows = []
    for key, runs in groups.items():
        row: dict[str, Any] = dict(zip(by, key, strict=True))
        row["label"] = method_label(runs[0]["method"])
        row["exact"] = bool(runs[0].get("exact", False))
        row["seeds"] = len(runs)
        row["learning_failed"] = sum(record_failed_learning(r) for r in runs)
        summary = summarize_metrics(r["metrics"] for r in runs)
        del summary["n_runs"]
        row.update(summary)
        stats = [s for r in runs for s in (r.get("unlearning_stats") or [])]
        for name in STAT_NAMES:
            row[f"{name}_mean"], row[f"{name}_std"] = _mean_std(
                [float(s[name]) for s in stats if s.get(name) is not None])
        for name in _TIMINGS:
            row[f"{name}_mean"], row[f"{name}_std"] = _mean_std(
                [float(r["timings"][name]) for r in runs if r["timings"].get(name) is not None])
        for name, value_of in (extra or {}).items():
            values = [value_of(r) for r in runs]
            row[f"{name}_mean"], row[f"{name}_std"] = _mean_std(
                [float(v) for v in values if v is not None])
        row["model_size_mb"] = max(r["model_size_mb"] for r in runs)
        rows.append(row)
    return pd.DataFrame(rows)


def varying_keys(configs: Sequence[Mapping]) -> list[str]:
    """The configuration keys whose values differ among ``configs``, sorted."""
    keys = sorted({k for c in configs for k in c})
    return [k for k in keys if len({json.dumps(c.get(k), sort_keys=True, default=str)
                                    for c in configs}) > 1]


def table1_frame(records: Iterable[dict], methods: Sequence[str] | None = None) -> pd.DataFrame:
    """One row per benchmark and method, PALL's once per α (``alpha``, empty for the other
    methods): ``row`` (the printed label, PALL's with its α), mean and std over seeds of every
    metric, the worst seed's A_l (A_l^min), the model size (MB, at |Ω| = T) and the
    number of seeds and of records that failed a learning check (``learning_failed``). Rows
    follow ``methods`` (default :data:`TABLE1_ORDER`; other methods are
    left out), PALL's by α.

    :raises ValueError: when one row's records come from different configurations (seeds
        aside): a row averages the seeds of one configuration.
    """
    records = [{**r, "alpha": _key(r, "alpha") if r["method"] == "pall" else None}
               for r in records]
    configs: dict[tuple, dict[str, Mapping]] = {}
    for r in records:
        configs.setdefault((_key(r, "benchmark"), r["method"], r["alpha"]), {})[
            config_hash(r["config"])] = r["config"]
    for (benchmark, method, _), found in configs.items():
        if len(found) > 1:
            raise ValueError(
                f"the {method} records of {benchmark} come from {len(found)} configurations "
                f"(differing in {varying_keys(list(found.values()))}); a Table 1 row averages "
                "the seeds of one: give folders that hold one Table 1 run per benchmark (the --out "
                "of benchmarks/table1.py)")
    frame = summary_frame(records, ("benchmark", "method", "alpha"))
    if frame.empty:
        return frame
    rank = {m: i for i, m in enumerate(methods if methods is not None else TABLE1_ORDER)}
    frame = frame[frame["method"].isin(rank)]
    frame = frame.assign(rank=frame["method"].map(rank)).sort_values(["rank", "alpha"],
                                                                     kind="stable")
    columns = ["method", "benchmark", "alpha", "row", "exact", "seeds",
               *[c for n in METRIC_NAMES for c in (f"{n}_mean", f"{n}_std")
                 + (("A_l_min",) if n == "A_l" else ())], "model_size_mb", "learning_failed"]
    return label_rows(frame, "alpha", "α")[columns].reset_index(drop=True)


def label_rows(frame: pd.DataFrame, key: str, symbol: str,
               methods: Sequence[str] = ("pall",)) -> pd.DataFrame:
    """A copy with a ``row`` column: the method's label, plus ``" (<symbol>=<value of key>)"``
    for ``methods`` (e.g. PALL (α=0.2), PALL (β=0.5))."""
    rows = [f"{label} ({symbol}={value:g})" if method in methods and value is not None
            else label for label, method, value in zip(frame["label"], frame["method"],
                                                        frame[key], strict=True)]
    return frame.assign(row=rows)


def request_timings(record: Mapping, learn_index: int, unlearn_index: int
                    ) -> tuple[float, float]:
    """(seconds per epoch of request ``learn_index``, seconds of request ``unlearn_index``)
    of one record; raises ValueError when those requests are not a learning and an
    unlearning request."""
    timings = record["timings"]["per_request"]
    if not (0 <= learn_index < len(timings) and 0 <= unlearn_index < len(timings)):
        raise ValueError(f"request indices {learn_index}, {unlearn_index} outside the "
                         f"{len(timings)} requests of the record")
    learn, unlearn = timings[learn_index], timings[unlearn_index]
    if learn["kind"] != RequestKind.LEARN or unlearn["kind"] != RequestKind.UNLEARN:
        raise ValueError(f"request {learn_index} is {learn['kind']!r} and request "
                         f"{unlearn_index} is {unlearn['kind']!r}; expected learn and unlearn")
    return float(learn["seconds_per_epoch"]), float(unlearn["seconds"])


def table1_points(frame: pd.DataFrame) -> dict[str, list[dict[str, Any]]]:
    """What the Table 1 figure draws, per benchmark of a :func:`table1_frame`: one point per
    row whose A_l and A_u are both defined (an unlearning request, and a task still learned
    at the end: ``L0 U0`` has no A_l) — ``row``, ``exact``, ``failed`` (its
    :func:`failed_mark`), mean and std of A_l and A_u — in the table's order."""
    points: dict[str, list[dict[str, Any]]] = {}
    for _, r in frame.iterrows():
        if pd.isna(r["A_u_mean"]) or r["A_l_mean"] is None or pd.isna(r["A_l_mean"]):
            continue
        points.setdefault(r["benchmark"], []).append({
            "row": r["row"], "exact": bool(r["exact"]),
            "failed": failed_mark(int(r["learning_failed"]), int(r["seeds"])),
            "A_l": float(r["A_l_mean"]), "A_l_std": or_zero(r["A_l_std"]),
            "A_u": float(r["A_u_mean"]), "A_u_std": or_zero(r["A_u_std"])})
    return points


def or_zero(value: Any) -> float:
    return 0.0 if value is None or pd.isna(value) else float(value)


def chance_by_benchmark(records: Iterable[dict]) -> dict[str, float]:
    """Benchmark → chance accuracy (percent: 100 / classes per task) of ``records``."""
    return {r["benchmark"]: 100.0 / r["split"]["classes_per_task"] for r in records}


# ------------------------------------------------------------------------------------ CLI
def load_records(results_dir: str | Path) -> list[dict]:
    """Every result record (``seed*.json``) under ``results_dir``, in path order. A file
    that is not a usable record (truncated or invalid JSON, NaN, required keys missing:
    :func:`~pall_avalanche.files.load_record`) is skipped with a
    :class:`~pall_avalanche.files.RunWarning` naming it (one line each); it is left in place
    (a run on that folder sets it aside and computes the record again). Of records of one run
    written by several versions of the code (the scripts keep the old record when the code
    changes), only the newest is kept, with one warning line (:func:`newest_per_run`)."""
    root = Path(results_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"results folder {root} does not exist")
    records, paths = [], []
    for path in sorted(root.rglob("seed*.json")):
        try:
            records.append(load_record(path))
            paths.append(path)
        except CorruptFileError as err:
            warnings.warn(f"skipped {err}", RunWarning, stacklevel=2)
    return newest_per_run(records, paths)


def _run_key(record: dict) -> str:
    """What makes two records the same run, whatever code wrote them: method, seed,
    configuration, requests and training seed."""
    return json.dumps([record["method"], record["seed"], record["config"], record["requests"],
                       record.get("train_seed")], sort_keys=True, default=str)


def newest_per_run(records: Sequence[dict], paths: Sequence[Path]) -> list[dict]:
    """``records`` (read from ``paths``) with one record per run (:func:`_run_key`): where
    several versions of the code wrote one run, the newest (``finished_at``) is kept and a
    :class:`~pall_avalanche.files.RunWarning` says how many were left out, naming one."""
    newest: dict[str, int] = {}
    for i, record in enumerate(records):
        key = _run_key(record)
        if key not in newest or (str(record.get("finished_at", "")) >
                                 str(records[newest[key]].get("finished_at", ""))):
            newest[key] = i
    kept = sorted(newest.values())
    left = [i for i in range(len(records)) if i not in set(kept)]
    if left:
        keys = [_run_key(records[i]) for i in left]
        warnings.warn(f"{len(left)} record(s) of older code left out, e.g. {paths[left[0]]} "
                      f"(the same run's newer record: {paths[newest[keys[0]]]})", RunWarning,
                      stacklevel=3)
    return [records[i] for i in kept]


def model_size_symbol(method: str) -> str:
    """Table 1's model size of a registered method: :data:`DENSE_SIZE` (``d``),
    :data:`SUBNETWORK_SIZE` (``d + M_i``: PackNet, WSN, PALL, the sparse subnetworks) or
    :data:`INDEPENDENT_SIZE` (``d × |Ω_i|``)."""
    return METHOD_INFO[method].size
