"""What the audit judges each method by, declared per method in one place (:data:`PLANS`).

A plan names the method's two *primary* tests, the only ones its verdict rests on: one leak
test (does the attack find D^t in the unlearned model?) and one distinguishability test (can
the unlearned model be told from a never-learned one?). They form the method's own family of
tests, corrected together (Holm), so a method's verdict never depends on which other methods
one command audits. A plan also names the method's *positive control*: a model of the same
kind whose unlearning changes nothing. The attack has power for the method only if it detects
that control with the control's own primary leak test; otherwise nothing is judged.

Three kinds of model, three controls:

- subnetworks in one network (PALL and its variants, WSN, PackNet, the sparse ablations, HAT,
  Amnesiac HAT): ``pall_no_unlearning``;
- a model of its own per task (Independent, CLPU-DER++'s side networks):
  ``independent_no_unlearning``;
- one dense network (Sequential, EWC, LwF, LSF, GEM, ER, DER++, ER (Retraining), the Amnesiac
  learners, UnCLe's generated network, and any method without a plan, such as a plugin's):
  Sequential, whose unlearning changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from pall_avalanche.catalog import AUDIT_CONTROL, AUDIT_LEAKS

__all__ = ["DENSE", "PALL_CHANNELS", "PER_TASK_MODELS", "PLANS", "SUBNETWORKS", "TEST_NAMES",
           "AuditPlan", "controls_needed", "plan_for"]

#: Every test of an audit row, in words (the verdict names the test that rejected).
TEST_NAMES = {"leak_auc": "per-example attack", "leak_inout_auc": "task-level attack",
              "auc": "Eq. 1", "auc_head": "Eq. 1 on t's head", "klom_forget_q0.9": "KLoM"}


@dataclass(frozen=True)
class AuditPlan:
    """A method's primary tests and positive control (module docstring).

    :param kind: the kind of model, in words.
    :param control: the registered name of the positive control.
    :param leak_test: the primary leak test (a key of :data:`TEST_NAMES`).
    :param distinguish_test: the primary distinguishability test.
    """

    kind: str
    control: str
    leak_test: str = "leak_auc"
    distinguish_test: str = "auc"

    @property
    def family(self) -> tuple[str, str]:
        """The method's family of tests: its two primary tests."""
        return self.leak_test, self.distinguish_test


SUBNETWORKS = AuditPlan("subnetworks in one network", AUDIT_CONTROL)
PER_TASK_MODELS = AuditPlan("a model per task", "independent_no_unlearning")
DENSE = AuditPlan("one dense network", "sequential")

#: The declared plans; a method without one is judged as :data:`DENSE`.
PLANS = {
    **dict.fromkeys(("pall", "pall_beta0", "pall_strict", "pall_frozen_tokens", "wsn",
                     "packnet", "static_sparse", "dynamic_sparse", "hat", "amnesiac_hat",
                     AUDIT_CONTROL, *AUDIT_LEAKS), SUBNETWORKS),
    **dict.fromkeys(("independent", "clpu_derpp", "independent_no_unlearning"),
                    PER_TASK_MODELS),
}


#: The methods whose channels the leaky PALL variants leak by (m̄_t, t's head, B^t in
#: retraining, a fraction of what t trained): the variants run beside them.
PALL_CHANNELS = ("pall", "pall_beta0", "pall_strict", "pall_frozen_tokens")


def plan_for(method: str) -> AuditPlan:
    """``method``'s declared plan, :data:`DENSE` when it has none."""
    return PLANS.get(method, DENSE)


def controls_needed(methods: list[str]) -> list[str]:
    """The positive controls the plans of ``methods`` name (the instruments a command runs
    beside them), in order, those already among ``methods`` left out."""
    return [c for c in dict.fromkeys(plan_for(m).control for m in methods) if c not in methods]
