"""What the audit judges each method by, declared per method in one place (:data:`PLANS`).

A plan names the method's two *primary* tests, the only ones its verdict rests on: one leak
test (does the attack find D^t in the unlearned model?) and one distinguishability test (can
the unlearned model be told from a never-learned one?). They form the method's own family of
tests, corrected together (Holm), so a method's verdict never depends on which other methods
one command audits. A plan also names the method's *positive control*: a model of the same
kind whose unlearning changes nothing. The attack has power for the method only if it detects
that control with the control's own primary leak test; otherwise nothing is judged. And it
names the *leaky variants* of its kind, which keep a known part of what t trained through one
channel such a model could leak by: they run beside the method and say how small a leak the
attack detects (none named: "not measured").

Three kinds of model, three controls:

- subnetworks in one network (PALL and its variants, WSN, PackNet, the sparse ablations, HAT,
  Amnesiac HAT): ``pall_no_unlearning``; PALL and its variants add the leaky PALL variants
  (:data:`~pall_avalanche.catalog.AUDIT_LEAKS`: a fraction of what t trained, m̄_t, t's head,
  B^t in retraining), the other subnetwork methods have none;
- a model of its own per task (Independent, CLPU-DER++'s side networks):
  ``independent_no_unlearning``, and Independent keeping half or a quarter of t's model;
- one dense network (Sequential, EWC, LwF, LSF, GEM, ER, DER++, ER (Retraining), the Amnesiac
  learners, UnCLe's generated network, and any method without a plan, such as a plugin's):
  Sequential, whose unlearning changes nothing, and Sequential with half or three quarters of
  t's update removed.
"""

from __future__ import annotations

from dataclasses import dataclass

from pall_avalanche.catalog import (
    AUDIT_CONTROL,
    AUDIT_DENSE_LEAKS,
    AUDIT_LEAKS,
    AUDIT_PER_TASK_CONTROL,
    AUDIT_PER_TASK_LEAKS,
)

__all__ = ["DENSE", "PALL_SUBNETWORKS", "PER_TASK_MODELS", "PLANS", "SUBNETWORKS",
           "TEST_NAMES", "AuditPlan", "instrument_names", "instruments_needed", "plan_for"]

#: Every test of an audit row, in words (the verdict names the test that rejected).
TEST_NAMES = {"leak_auc": "per-example attack", "leak_inout_auc": "task-level attack",
              "leak_max_example_auc": "per-example maximum",
              "auc": "Eq. 1", "auc_head": "Eq. 1 on t's head",
              "auc_unpaired": "Eq. 1 (unpaired)",
              "klom_forget_in_q0.9": "KLoM (IN runs)",
              "klom_forget_in_unpaired_q0.9": "KLoM (IN runs, unpaired)",
              "canary_auc": "canary test"}


@dataclass(frozen=True)
class AuditPlan:
    """A method's primary tests and positive control (module docstring).

    :param kind: the kind of model, in words.
    :param control: the registered name of the positive control.
    :param leaks: the registered names of the leaky variants of its kind, largest leak first.
    :param leak_test: the primary leak test (a key of :data:`TEST_NAMES`).
    :param distinguish_test: the primary distinguishability test.
    """

    kind: str
    control: str
    leaks: tuple[str, ...] = ()
    leak_test: str = "leak_auc"
    distinguish_test: str = "auc"

    @property
    def family(self) -> tuple[str, str]:
        """The method's family of tests: its two primary tests."""
        return self.leak_test, self.distinguish_test


#: Subnetworks in one network (WSN, PackNet, HAT, ...): PALL's positive control, no leaky
#: variants of their own.
SUBNETWORKS = AuditPlan("subnetworks in one network", AUDIT_CONTROL)
#: PALL and its variants: subnetworks, with the leaky PALL variants (their channels).
PALL_SUBNETWORKS = AuditPlan(SUBNETWORKS.kind, AUDIT_CONTROL, AUDIT_LEAKS)
#: A model per task (Independent, CLPU-DER++'s side networks).
PER_TASK_MODELS = AuditPlan("a model per task", AUDIT_PER_TASK_CONTROL, AUDIT_PER_TASK_LEAKS)
#: One dense network (Sequential, EWC, DER++, ..., and any method without a plan).
DENSE = AuditPlan("one dense network", "sequential", AUDIT_DENSE_LEAKS)

#: The declared plans; a method without one is judged as :data:`DENSE`.
PLANS = {
    **dict.fromkeys(("pall", "pall_beta0", "pall_strict", "pall_frozen_tokens", AUDIT_CONTROL,
                     *AUDIT_LEAKS), PALL_SUBNETWORKS),
    **dict.fromkeys(("wsn", "packnet", "static_sparse", "dynamic_sparse", "hat",
                     "amnesiac_hat"), SUBNETWORKS),
    **dict.fromkeys(("independent", "clpu_derpp", AUDIT_PER_TASK_CONTROL,
                     *AUDIT_PER_TASK_LEAKS), PER_TASK_MODELS),
}


def plan_for(method: str) -> AuditPlan:
    """``method``'s declared plan, :data:`DENSE` when it has none."""
    return PLANS.get(method, DENSE)


def instruments_needed(methods: list[str], leaks: bool = True) -> list[str]:
    """The positive controls and (with ``leaks``) the leaky variants the plans of ``methods``
    name (the instruments a command runs beside them), in order, those already among
    ``methods`` left out."""
    plans = [plan_for(m) for m in methods]
    named = [*(p.control for p in plans),
             *(leak for p in plans if leaks for leak in p.leaks)]
    return [m for m in dict.fromkeys(named) if m not in methods]


def instrument_names() -> set[str]:
    """Every method some plan names as its positive control or a leaky variant."""
    plans = {*PLANS.values(), DENSE}
    return {m for p in plans for m in (p.control, *p.leaks)}
