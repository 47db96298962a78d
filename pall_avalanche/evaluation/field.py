"""The continual-unlearning field's metrics against reference runs (docs/fidelity.md, "The
field"), as pure functions of records (numbers only; the probe that stores what they need in
a run's record and the Avalanche metric are in :mod:`pall_avalanche.evaluation.references`).

Two reference runs of the same method and seed (ordinary records, launched by
``benchmarks/table_field.py``; their sequences from :func:`reference_sequences`): the
*retrained* reference learns every task but the unlearned ones, the *never-unlearned*
reference every task. In CLArena's form (``"continual"``, the default) both are the method's
continual-learning run with unlearning switched off, every task learned permanently (CLArena's
``CUL_REF_RETRAIN_EXPR`` and ``CUL_REF_ORIGINAL_EXPR``: for CLPU-DER++ that is DER++, for
Amnesiac HAT HAT without backups); in the protocol's form (``"protocol"``) they are the run's
own sequence without any request of the unlearned tasks (the exactness audit's oracle) and
without its unlearning requests. Against them (final models):

- **feature distance** (CLArena's ``cul_dd``): on the test inputs of every unlearned task t,
  through t's route (its head, mask or network) in both models, the backbone features of the
  unlearned model F and of the retrained reference G, per test batch (the evaluation batch
  size) and averaged over the batches with equal weight, as CLArena accumulates them:
  euclidean, the mean over a batch's inputs of ‖F_i − G_i‖₂; cosine, the mean of
  1 − cos(F_i, G_i); and 1 − linear CKA of the batch (Kornblith et al., 2019: with centred
  columns, CKA = ‖GᵀF‖²_F / (‖FᵀF‖_F ‖GᵀG‖_F)); the mean over the unlearned tasks. 0 when the
  unlearned model computes what the retrained one does (also for zero or constant
  features).
- **accuracy gain** (CLArena's ``cul_ag``): the mean over the remaining tasks of the final test
  accuracy minus the never-unlearned reference's (percentage points): what unlearning cost (or
  gave) the tasks that stay.
- **ToW** (tug-of-war, Zhao et al., "What makes unlearning hard", RUM
  ``surgical_plugins/analysis.py``): (1 − |a_f − a_f′|)(1 − |a_r − a_r′|)(1 − |a_t − a_t′|),
  accuracies in [0, 1] of the unlearned model and (primed) of the retrained reference on the
  forget set (the unlearned tasks' training data), the retain set (the remaining tasks'
  training data) and the test set (the test data of every learned task); 1 when the two
  agree everywhere. Over seeds: the mean with a 95 % Student-t interval
  (:func:`t_interval`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pall_avalanche.requests import RequestKind, RequestSequence

__all__ = ["FIELD_METRICS", "REFERENCE_FORMS", "accuracy_gain", "feature_distance",
           "field_metrics", "linear_cka", "reference_sequences", "tug_of_war"]

#: The field's metrics of a run (name → what it is), in table order.
FIELD_METRICS = {
    "dd_euclidean": "feature distance to the retrained reference, euclidean",
    "dd_cosine": "feature distance to the retrained reference, cosine",
    "dd_cka": "feature distance to the retrained reference, 1 - linear CKA",
    "accuracy_gain": "A_l minus the never-unlearned reference's, on the remaining tasks",
    "tow": "tug-of-war against the retrained reference",
}


#: The forms of the reference runs (:func:`reference_sequences`), the default first.
REFERENCE_FORMS = ("continual", "protocol")


def reference_sequences(sequence: RequestSequence, form: str = "continual",
                        unlearnable_age: int | None = None
                        ) -> tuple[RequestSequence, RequestSequence]:
    """The (retrained, never-unlearned) reference sequences of a run's ``sequence``.

    ``"continual"`` (CLArena's reference experiments): the learning requests of every task but
    the unlearned ones, and of every task, each learned permanently with no other request
    (:meth:`~pall_avalanche.requests.RequestSequence.as_continual_learning`).
    ``"protocol"``: ``sequence`` without any request of its unlearned tasks, and without its
    unlearning requests (with the ``unlearnable_age`` the sequence was generated with, each
    formerly unlearned task made permanent where that protocol makes the others:
    :meth:`~pall_avalanche.requests.RequestSequence.without_unlearning`).

    :raises ValueError: an unknown ``form``, or a sequence that unlearns every task it learns
        (the retrained reference would have no request).
    """
    if form not in REFERENCE_FORMS:
        raise ValueError(f"reference form {form!r} is invalid; valid: {REFERENCE_FORMS}")
    retrained = sequence.without_tasks(sequence.unlearned_tasks)
    if not len(retrained):
        raise ValueError(f"{sequence}: every task it learns is unlearned, so the "
                         "retrained reference (the sequence without the unlearned tasks) has "
                         "no request; give a sequence that keeps a task learned")
    if form == "continual":
        return retrained.as_continual_learning(), sequence.as_continual_learning()
    return retrained, sequence.without_unlearning(unlearnable_age)


def linear_cka(x: np.ndarray, y: np.ndarray) -> float:
    """Linear CKA of two feature matrices over the same n inputs (rows): with centred
    columns, ‖YᵀX‖²_F / (‖XᵀX‖_F ‖YᵀY‖_F) (Kornblith et al., 2019); 1 for X with itself, near
    0 for independent ones; 0 when either is constant."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if x.ndim != 2 or y.ndim != 2 or len(x) != len(y):
        raise ValueError(f"CKA needs two matrices with the same rows, got {x.shape} and "
                         f"{y.shape}")
    x = x - x.mean(axis=0)
    y = y - y.mean(axis=0)
    denominator = np.linalg.norm(x.T @ x) * np.linalg.norm(y.T @ y)
    return float(np.linalg.norm(y.T @ x) ** 2 / denominator) if denominator else 0.0


def feature_distance(features: np.ndarray, reference: np.ndarray, kind: str,
                     batch_size: int | None = None) -> float:
    """The distance of ``features`` to ``reference`` (n × d each, the same inputs in the same
    order): ``euclidean`` (mean ‖F_i − G_i‖₂), ``cosine`` (mean 1 − cos(F_i, G_i); a zero row
    beside a non-zero one counts as orthogonal, as in CLArena) or ``cka`` (1 −
    :func:`linear_cka`). Identical features are at distance 0 by every kind, also where the
    formula has no value (two zero rows, two equal constant matrices).

    :param batch_size: compute the distance on every consecutive batch of this many inputs
        (the test loader's batches) and average the batches with equal weight, as CLArena's
        distribution-distance callback accumulates its test batches (``on_test_batch_end``;
        its weight, ``len(batch)`` of an (inputs, targets) pair, is the same for every
        batch): the field table's form. ``None``: one distance over all n inputs, which for
        CKA is another statistic (CKA over the whole set is not the mean of the batches').
    """
    f = np.asarray(features, dtype=np.float64)
    g = np.asarray(reference, dtype=np.float64)
    if f.shape != g.shape:
        raise ValueError(f"features of shape {f.shape} and {g.shape} are not of the same inputs")
    if batch_size is not None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size={batch_size!r} must be an integer >= 1 or None")
        return float(np.mean([feature_distance(f[i:i + batch_size], g[i:i + batch_size], kind)
                              for i in range(0, len(f), batch_size)]))
    if kind == "euclidean":
        return float(np.linalg.norm(f - g, axis=1).mean())
    if kind == "cosine":
        norms = np.linalg.norm(f, axis=1) * np.linalg.norm(g, axis=1)
        cosine = np.divide((f * g).sum(axis=1), norms, out=np.zeros(len(f)), where=norms > 0)
        cosine[(f == g).all(axis=1)] = 1.0
        return float((1 - cosine).mean())
    if kind == "cka":
        return 0.0 if np.array_equal(f, g) else 1.0 - linear_cka(f, g)
    raise ValueError(f"unknown feature distance {kind!r}; valid: euclidean, cosine, cka")


def accuracy_gain(accuracy: Sequence[float], reference: Sequence[float],
                  tasks: Sequence[int]) -> float | None:
    """The mean over ``tasks`` (the remaining ones) of ``accuracy[t] − reference[t]`` (final
    test accuracies, percent); ``None`` without tasks."""
    if not tasks:
        return None
    return float(np.mean([accuracy[t] - reference[t] for t in tasks]))


def tug_of_war(accuracies: Mapping[str, float], reference: Mapping[str, float]) -> float:
    """Π over the sets ``forget``, ``retain`` and ``test`` of 1 − |a − a′| (accuracies in
    [0, 1]); a set missing from either side (no retained task) is left out of the product."""
    out = 1.0
    for name in ("forget", "retain", "test"):
        if accuracies.get(name) is not None and reference.get(name) is not None:
            out *= 1.0 - abs(accuracies[name] - reference[name])
    return out


def _sets(probe: Mapping[str, Any], unlearned: Sequence[int], remaining: Sequence[int]
          ) -> dict[str, float | None]:
    """The forget, retain and test accuracies (fractions) of a probe, sample-weighted."""
    def pooled(kind: str, tasks: Sequence[int]) -> float | None:
        if not tasks:
            return None
        correct = sum(probe[kind][str(t)]["correct"] for t in tasks)
        return correct / sum(probe[kind][str(t)]["n"] for t in tasks)

    return {"forget": pooled("train", unlearned), "retain": pooled("train", remaining),
            "test": pooled("test", [*remaining, *unlearned])}


def field_metrics(record: Mapping[str, Any], retrained: Mapping[str, Any],
                  never_unlearned: Mapping[str, Any]) -> dict[str, float | None]:
    """The field's metrics (:data:`FIELD_METRICS`) of a run's ``record`` from its reference
    records (each with the ``probe`` of
    :class:`~pall_avalanche.evaluation.references.FieldProbe`); ``None`` where undefined (no
    unlearned task: no distance, no ToW)."""
    requests = record["requests"]
    unlearned = [r["task"] for r in requests if r["kind"] == RequestKind.UNLEARN]
    remaining = sorted({r["task"] for r in requests if r["kind"] == RequestKind.LEARN}
                       - set(unlearned))
    out: dict[str, float | None] = dict.fromkeys(FIELD_METRICS)
    out["accuracy_gain"] = accuracy_gain(record["accuracy"][-1],
                                         never_unlearned["accuracy"][-1], remaining)
    if unlearned:
        probe, reference = record["probe"], retrained["probe"]
        for kind in ("euclidean", "cosine", "cka"):
            out[f"dd_{kind}"] = float(np.mean([
                feature_distance(probe["features"][str(t)], reference["features"][str(t)], kind,
                                 batch_size=record["eval_batch_size"])
                for t in unlearned]))
        out["tow"] = tug_of_war(_sets(probe, unlearned, remaining),
                                _sets(reference, unlearned, remaining))
    return out
