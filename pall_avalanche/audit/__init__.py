"""Exactness audit: could an adversary tell that task t was learned and then unlearned?

Two experiments, in rooms of their own:

- :mod:`~pall_avalanche.audit.oracle` — Eq. 1: the unlearned model against oracles that
  never learned t (below), with relapse and the relearning attack
  (:mod:`~pall_avalanche.audit.relearn`);
- :mod:`~pall_avalanche.audit.shadows` — the per-example IN/OUT attack (U-LiRA style) on
  shadow runs that learn t on random halves of D^t, with never-learned oracles as control
  (statistics in :mod:`~pall_avalanche.audit.attacks`);

and :mod:`~pall_avalanche.audit.verdict` turns both into one line per method: "leaks D^t",
"leaves a signature, not of D^t" or "no leak found" (and, for a method registered
``exact=True``, whether the evidence supports the claim).

For a request sequence R that unlearns the tasks U, the oracle sequence R′ is R without any
request of a task in U (:func:`oracle_sequence`). Per method and seed the audit trains three
models with the same class split and the same initial weights (the runner seeds both from
the seed): the unlearned model on R, the oracle on R′, and a reference oracle on R′ with
different training randomness (``train_seed``), which gives the oracle-vs-oracle baseline.
An :class:`AuditProbe` rides along each run: it records the final model's logits (every
head) on each unlearned task's training inputs and held-out test inputs, and, for
subnetwork methods, a run-time :class:`ProvenanceTracker` check.

Measurements (:func:`audit_rows`), each with a 95 % interval over seeds:

- **Distinguisher AUC** (Eq. 1 directly): a logistic regression, 5-fold cross-validated,
  separates "learned then unlearned t" (R) from "never learned t" (R′) using summary
  features of the final model's outputs on t's training inputs (:func:`model_features`):
  all heads, and t's head only. Interval: percentile bootstrap over seeds (2,000 resamples
  of the out-of-fold scores). 0.5 = indistinguishable.
- **JS gap**: mean Jensen–Shannon divergence (bits, per head's softmax, averaged over heads
  and inputs) of the unlearned model to the reference oracle minus that of the oracle to the
  reference oracle. Interval: Student t over the per-seed differences. 0 = as close as
  another oracle.
- **MIA gap**: membership inference on t's training inputs against held-out inputs of the
  same classes — a loss attack (score −CE on t's head) and a feature attack (logistic
  regression on per-sample confidences, 5-fold) — AUC on the unlearned model minus AUC on the
  oracle. Interval: Student t over seeds.
- **Provenance** (subnetwork methods): at every unlearning request, every entry whose current
  value was trained with D^t or B^t must have been re-drawn (direct); the strict check also
  requires the entries trained while t's weights were in the forward pass, and the stored
  buffer logits, to be free of t.
- **Relapse**: after t's unlearning, the largest rise of t's accuracy over the rest of the
  sequence (:func:`~pall_avalanche.evaluation.metrics.relapse`), mean with a Student-t
  interval over seeds and the worst record.
- **Relearning**: the final model fine-tuned on a few samples of t against the oracle
  fine-tuned the same way (gaps in accuracy after a few steps and in steps to a threshold).
"""

from pall_avalanche.audit.oracle import (
    REFERENCE_SEED_OFFSET,
    AuditProbe,
    audit_rows,
    interval_cell,
    oracle_sequence,
    run_audit,
    separated,
)
from pall_avalanche.audit.provenance import ProvenanceTracker
from pall_avalanche.audit.statistics import (
    N_FOLDS,
    bootstrap_auc_interval,
    distinguisher_scores,
    head_probabilities,
    js_divergence,
    membership_aucs,
    model_features,
    roc_auc,
    t_interval,
)
from pall_avalanche.catalog import AUDIT_REQUESTS

__all__ = [
    "AUDIT_REQUESTS",
    "AuditProbe",
    "N_FOLDS",
    "ProvenanceTracker",
    "REFERENCE_SEED_OFFSET",
    "audit_rows",
    "bootstrap_auc_interval",
    "distinguisher_scores",
    "head_probabilities",
    "interval_cell",
    "js_divergence",
    "membership_aucs",
    "model_features",
    "oracle_sequence",
    "roc_auc",
    "run_audit",
    "separated",
    "t_interval",
]
