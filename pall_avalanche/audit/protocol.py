"""The exactness audit's protocol, torch-free: the command line reads it before anything
heavy is imported (:mod:`pall_avalanche.paper.audit`)."""

from __future__ import annotations

__all__ = ["AUDIT_REQUESTS", "N_FOLDS", "N_PERMUTATIONS", "REFERENCE_SEED_OFFSET"]

#: The audited sequence R: task 1 learned, then unlearned; the oracle sequence R′ is R
#: without task 1.
AUDIT_REQUESTS = ("L0", "L1", "L2", "L3", "U1", "L4")
#: Added to a seed for the reference oracle: other training randomness, the same split.
REFERENCE_SEED_OFFSET = 100_000
#: Folds of Eq. 1's cross-validated distinguisher (at least this many seeds).
N_FOLDS = 5
#: Permutations per test: the smallest p-value is 1 / (N + 1) ≈ 0.0005, small enough for
#: Holm's correction over a report's tests (:mod:`pall_avalanche.audit.permutation`).
N_PERMUTATIONS = 2000
