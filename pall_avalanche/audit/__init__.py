"""Exactness audit: could an adversary tell that task t was learned and then unlearned?

The experiments and their modules:

- :mod:`~pall_avalanche.audit.oracle` — Eq. 1: per seed, the unlearned model against an oracle
  that never learned t and a reference oracle; the distinguisher's permutation test, JS and
  MIA gaps, provenance, relapse beside the oracle's, the relearning attack
  (:mod:`~pall_avalanche.audit.relearn`);
- :mod:`~pall_avalanche.audit.shadows` — shadow runs that learn t on random halves of D^t:
  the per-example IN/OUT attack (U-LiRA style) against the same attack on never-learned
  oracles, KLoM per example and the retained-set exposure
  (:mod:`~pall_avalanche.audit.exposure`);
- :mod:`~pall_avalanche.audit.swapped` — the data-swap pairs: two runs that differ only in
  t's training data, their whole states compared bit for bit after t's unlearning request;
- :mod:`~pall_avalanche.audit.probes` — what rides along those runs (the records' contents);
- :mod:`~pall_avalanche.audit.plans` — what each method is judged by: its two primary tests
  and the positive control of its kind of model (:mod:`~pall_avalanche.strategies.leaky`,
  :mod:`~pall_avalanche.strategies.controls`: unlearning that changes nothing), and PALL
  variants that leak a known amount through one of its channels;
- :mod:`~pall_avalanche.audit.permutation` — the calibrated tests (permutation nulls, Holm);
- :mod:`~pall_avalanche.audit.summary` and :mod:`~pall_avalanche.audit.verdict` — one line
  per method, and only what the evidence carries: "not measurable" when t was not learned,
  "no power" when its positive control is not detected, else "leaks D^t", "distinguishable
  from never-learned" or "no leak found", each naming the test, and for a method registered
  exact an equivalence claim: "exact within ε" only when the leak's simultaneous upper bound
  is below the margin ε.

For a request sequence R that unlearns the tasks U, the oracle sequence R′ is R without any
request of a task in U (:func:`oracle_sequence`). Per method and seed the audit trains three
models with the same class split and the same initial weights (the runner seeds both from
the seed): the unlearned model on R, the oracle on R′, and a reference oracle on R′ with
different training randomness (``train_seed``).
"""

from pall_avalanche.catalog.registration import lazy_names

#: public name → the submodule defining it (loaded on first use: the torch-free modules,
#: :mod:`~pall_avalanche.audit.protocol` above all, import without torch)
_WHERE = {
    "AUDIT_REQUESTS": "protocol",
    "N_FOLDS": "protocol",
    "REFERENCE_SEED_OFFSET": "protocol",
    "AuditProbe": "probes",
    "ProvenanceTracker": "provenance",
    "audit_rows": "oracle",
    "audit_specs": "oracle",
    "interval_cell": "oracle",
    "oracle_sequence": "oracle",
    "run_audit": "oracle",
    "distinguisher_scores": "statistics",
    "head_probabilities": "statistics",
    "js_divergence": "statistics",
    "membership_aucs": "statistics",
    "model_features": "statistics",
    "roc_auc": "statistics",
}

__all__ = sorted(_WHERE)

__getattr__, __dir__ = lazy_names(__name__, _WHERE)
