"""What the shadow runs say beyond the IN/OUT attack, example by example.

- **Eq. 1 per example (KLoM).** Unlearned shadow run i and oracle shadow run i share their
  training seed and class split, so for every example (the audited task's, the remaining
  tasks', test) the margins of the unlearned models and of the oracles are two samples of the
  same distribution under exact unlearning. Per example: the KL divergence of Gaussians fitted
  to the two (:func:`~pall_avalanche.audit.permutation.gaussian_kl`, as KLoM does: Georgiev et
  al. 2024, "Attribute-to-delete"), summarised by its median and its worst decile over the
  examples of each group, with permutation p-values (swaps within run pairs). For the audited
  task's examples also on the pairs where the example was IN only (the runs that trained on
  it; a pair's two runs share their memberships), under swaps within pairs and, unpaired,
  under shuffles of all runs (a null that does not lean on the pairs' shared training seed).
- **Retained-set exposure.** Does unlearning t expose the remaining tasks' examples, above all
  the buffer members a replaying method trains on again while unlearning?
  :class:`~pall_avalanche.audit.probes.RetainedExposure` records, right before and right
  after the unlearning request, the margin of every remaining task's training example under
  its own head; per run the AUC of buffer members against the task's other training examples
  (a margin attack on buffer membership), before and after; the change after − before has a
  Student-t interval over the (independent) shadow runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pall_avalanche.audit.permutation import kl_test, row_aucs
from pall_avalanche.evaluation.metrics import t_interval

__all__ = ["KLOM_GROUPS", "klom_figures", "retained_figures"]

#: KLoM's example groups: the audited task's training examples, the remaining tasks'
#: training examples, every task's test examples.
KLOM_GROUPS = ("forget", "retain", "test")


# ------------------------------------------------------------------------- figures
def _klom_values(record: Mapping[str, Any], group: str) -> np.ndarray:
    return np.concatenate([np.asarray(m, dtype=np.float64)
                           for m in record["probe"]["margins"][group]])


def klom_figures(unlearned: Sequence[Mapping[str, Any]], oracle: Sequence[Mapping[str, Any]],
                 **options: Any) -> dict[str, float]:
    """KLoM per example group (module docstring) over run pairs: ``unlearned[i]`` and
    ``oracle[i]`` share their training seed and memberships. Keys ``klom_<group>_q0.5`` /
    ``_q0.9`` with ``_p`` and ``_null`` (:func:`~pall_avalanche.audit.permutation.kl_test`),
    and for the audited task's examples on their IN runs only ``klom_forget_in_...``, paired,
    and ``klom_forget_in_unpaired_...``; ``options`` go to the tests. Empty with fewer than 4
    pairs."""
    pairs = list(zip(unlearned, oracle, strict=True))
    out: dict[str, float] = {}
    if len(pairs) < 4:
        return out
    for group in KLOM_GROUPS:
        first = np.stack([_klom_values(u, group) for u, _ in pairs])
        second = np.stack([_klom_values(o, group) for _, o in pairs])
        tests = {group: kl_test(first, second, **options)}
        if group == "forget":
            member = np.zeros(first.shape, dtype=bool)
            for i, (u, _) in enumerate(pairs):
                member[i, u["probe"]["members"]] = True
            tests["forget_in"] = kl_test(first, second, member=member, **options)
            tests["forget_in_unpaired"] = kl_test(first, second, member=member, paired=False,
                                                  **options)
        for name, test in tests.items():
            out.update({f"klom_{name}_{k}": v for k, v in test.items() if k != "kl"})
    return out


def retained_figures(records: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Retained-set exposure (module docstring) over one method's unlearned shadow runs:
    ``retained_auc_before``, ``retained_auc_after`` (means over runs) and
    ``retained_change`` with ``_low`` / ``_high`` (Student-t, 95 %). Empty when the method
    keeps no buffer or fewer than 2 runs have one."""
    before, after = [], []
    for record in records:
        cells = record["probe"].get("retained") or {}
        scores_b, scores_a, labels = [], [], []
        for cell in cells.values():
            if cell.get("buffer") is None:
                continue
            member = np.zeros(len(cell["before"]))
            member[cell["buffer"]] = 1
            scores_b.append(cell["before"])
            scores_a.append(cell["after"])
            labels.append(member)
        if not labels:
            continue
        labels_all = np.concatenate(labels)
        before.append(float(row_aucs(np.concatenate(scores_b), labels_all)))
        after.append(float(row_aucs(np.concatenate(scores_a), labels_all)))
    if len(before) < 2:
        return {}
    change, low, high = t_interval(np.subtract(after, before))
    return {"retained_auc_before": float(np.mean(before)),
            "retained_auc_after": float(np.mean(after)), "retained_change": change,
            "retained_change_low": low, "retained_change_high": high}
