"""Nothing of a forgotten task stays in the strategy: a sequence run twice, the second time with
the unlearned task's training inputs replaced by others of the same classes and number (its
images mirrored), leaves after the unlearning request the same whole state — model, plugins'
state (buffers), the strategy's attributes; the request log, which reports what was measured
while the task was learned, aside — for the methods whose claim allows it, and for the others
exactly the entries docs/fidelity.md names."""

from __future__ import annotations

import pytest
import torch
from helpers import FAST_CONFIG
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from pall_avalanche.data import (
    DIGITS_SPLIT_SEED,
    DIGITS_TEST_FRACTION,
    build_benchmark,
    task_incremental_benchmark_from_tensors,
)
from pall_avalanche.requests import RequestSequence
from pall_avalanche.requests.streams import RequestStream
from pall_avalanche.runs.build import build_run

CONFIG = {**FAST_CONFIG, "epochs": 1, "train_per_task": 40}
#: Task 1 is learned, then tasks learned after it, then task 1 is unlearned.
SEQUENCE = "L0 L1 L2 U1"


def digits(mirrored: list[int]) -> object:
    """The digits benchmark of seed 0 as ``build_benchmark`` makes it, the training images of
    the classes ``mirrored`` flipped left to right (other inputs, the same labels)."""
    data = load_digits()
    x = torch.tensor(data.images, dtype=torch.float32).unsqueeze(1) / 16.0
    y = torch.tensor(data.target, dtype=torch.long)
    train, test = train_test_split(range(len(y)), test_size=DIGITS_TEST_FRACTION,
                                   random_state=DIGITS_SPLIT_SEED, stratify=data.target)
    train_x, test_x = x[train], x[test]
    mean, std = train_x.mean(), train_x.std()
    train_x = (train_x - mean) / std
    rows = torch.isin(y[train], torch.tensor(mirrored, dtype=torch.long))
    train_x[rows] = train_x[rows].flip(-1)
    return task_incremental_benchmark_from_tensors(
        "digits", (train_x, y[train]), ((test_x - mean) / std, y[test]), n_tasks=5, seed=0,
        train_per_task=CONFIG["train_per_task"])


def flat(state, prefix: str = "") -> dict:
    """Every leaf of a checkpoint state by its path."""
    if isinstance(state, dict):
        return {k: v for key, value in state.items() for k, v in flat(value,
                                                                      f"{prefix}{key}/").items()}
    if isinstance(state, (list, tuple)) and state and not isinstance(state[0], (int, float)):
        return {k: v for i, value in enumerate(state) for k, v in flat(value,
                                                                      f"{prefix}{i}/").items()}
    return {prefix: state}


def differing(method: str) -> list[str]:
    """The paths of the state that differ after the unlearning request between the run on
    digits and the run with task 1's training inputs mirrored."""
    forgotten = list(build_benchmark("digits", seed=0, n_tasks=5,
                                     train_per_task=CONFIG["train_per_task"]).split.class_order)
    cpt = 2
    states = []
    for mirrored in ([], forgotten[cpt:2 * cpt]):
        benchmark = digits(mirrored)
        strategy = build_run(method, CONFIG, seed=0, benchmark=benchmark,
                             measured=False).strategy
        for request in RequestStream(benchmark, RequestSequence.parse(SEQUENCE, 5)):
            strategy.train(request)
        state = strategy.checkpoint_state()
        state["strategy"].pop("request_log.results")
        states.append(flat(state))
    a, b = states
    assert len(a) > 5 and a.keys() == b.keys()

    def same(x, y) -> bool:
        return torch.equal(x, y) if isinstance(x, torch.Tensor) else x == y

    return sorted(k for k in a if not same(a[k], b[k]))


@pytest.mark.parametrize("method", ["independent", "clpu_derpp", "static_sparse"])
def test_an_exactly_unlearned_task_leaves_nothing_of_its_data(method):
    """Independent deletes t's model, CLPU-DER++ t's side network (t temporary), the static
    sparse subnetworks re-draw t's fixed share: every tensor, buffer and counter after the
    request is the one a run that never saw t's inputs has."""
    assert differing(method) == []


def test_what_pall_and_the_dynamic_subnetworks_keep_of_a_forgotten_task():
    """PALL: the entries later tasks trained with t's weights in their forward pass (the
    weights, the retraining ledger's entries) and the logits a later task's buffer stored
    through the network with t in it — the channels docs/fidelity.md lists ("Where exact
    unlearning is weaker"). Dynamic sparse: a later task's mask was chosen among the entries t
    left free, so that mask and the weights under it depend on t's data."""
    weights = {"model/net.backbone.1.bias/", "model/net.backbone.1.weight/",
               "model/net.backbone.3.bias/", "model/net.backbone.3.weight/",
               "model/net.head.weight/"}
    pall = differing("pall")
    assert weights <= set(pall)
    # task 2's buffer: its stored logits (entry 2 of the buffer), not its samples or labels
    buffers = [k for k in pall if k.startswith("plugins/") and "EpisodicMemory/buffers" in k]
    assert buffers == ["plugins/pall_avalanche.rehearsal.memory.EpisodicMemory/buffers/2/2/"]
    ledger = [k for k in pall if k.startswith("strategy/ledger.events/")]
    assert ledger and set(pall) == weights | set(buffers) | set(ledger)
    dynamic = differing("dynamic_sparse")
    assert set(dynamic) == weights | {"model/_extra_state/2/"}       # task 2's mask
