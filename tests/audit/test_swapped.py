"""The data-swap pairs (pall_avalanche.audit.swapped): two runs identical but for the audited
task's training half, their whole states compared entry by entry after its unlearning
request."""

from __future__ import annotations

import base64

import numpy as np
import pytest
from helpers import FAST_CONFIG, seq

from pall_avalanche.audit.probes import decode_state
from pall_avalanche.audit.swapped import SWAP_HALVES, channel, run_swapped, swap_rows

CONFIG = {**FAST_CONFIG, "epochs": 1, "train_per_task": 40, "n_retrain_iters": 5}
SEQUENCE = "L0 L1 L2 U1 L3"


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    methods = ["independent", "static_sparse", "pall", "sequential"]
    records = run_swapped(methods, CONFIG, tmp_path_factory.mktemp("swap"),
                          requests=seq(SEQUENCE), show_progress=False)
    return records, swap_rows(records, methods)


def test_the_pair_differs_in_the_audited_task_s_training_half_only(pairs):
    records, _ = pairs
    pall = {r["config"]["shadow_seed"]: r for r in records if r["method"] == "pall"}
    assert sorted(pall) == list(SWAP_HALVES)
    a, b = (pall[h] for h in SWAP_HALVES)
    assert a["train_seed"] == b["train_seed"] and a["seed"] == b["seed"]
    assert a["split"]["shadow"]["members"] != b["split"]["shadow"]["members"]
    assert len(a["split"]["shadow"]["members"]) == len(b["split"]["shadow"]["members"])
    assert a["probe"]["at"] == 3            # right after U1


def test_exact_methods_leave_identical_states_and_others_name_their_channels(pairs):
    records, rows = pairs
    assert rows["independent"] == {"swap_entries": 0, "swap_channels": {}}
    assert rows["static_sparse"]["swap_entries"] == 0
    # recount PALL's differing weights by hand from the decoded states
    states = [decode_state(r["probe"]["state"]) for h in SWAP_HALVES for r in records
              if r["method"] == "pall" and r["config"]["shadow_seed"] == h]
    weights = sum(int(np.sum(states[0][p] != states[1][p])) for p in states[0]
                  if p.startswith("model/") and "_extra_state" not in p
                  and isinstance(states[0][p], np.ndarray) and states[0][p].dtype.kind == "f")
    assert weights > 0 and rows["pall"]["swap_channels"]["weights"] == weights
    assert rows["pall"]["swap_entries"] == sum(rows["pall"]["swap_channels"].values())
    assert rows["sequential"]["swap_channels"]["weights"] > weights


def test_channels_by_path():
    assert channel("model/net.backbone.1.weight") == "weights"
    assert channel("model/_extra_state/2") == "masks (packed bytes)"
    assert channel("plugins/pall_avalanche.rehearsal.memory.EpisodicMemory/buffers/2/2") == \
        "buffer stored logits"
    assert channel("strategy/ledger.events/0") == "retraining ledger"
    assert channel("strategy/active_tasks") == "strategy active_tasks"


def test_channels_of_equal_counts_are_listed_by_name_whatever_the_hash_order():
    """Two channels that differ in as many entries (LSF's weights and its LwF plugin's copy
    of them) come in one order: by count, then by name."""
    def state(offset: float) -> dict:
        encoded = {"dtype": "float32", "shape": [3]}
        return {path: {**encoded, "bytes": base64.b64encode(
                    (np.arange(3, dtype=np.float32) + offset).tobytes()).decode("ascii")}
                for path in ("model/net.fc.weight", "plugins/x.TaskLwFPlugin/lwf.prev_model/0",
                             "strategy/codes/0")}
    first, second = state(0.0), state(1.0)
    second["strategy/codes/0"] = first["strategy/codes/0"]
    records = [{"method": "m", "config": {"shadow_seed": half}, "probe": {"state": s}}
               for half, s in zip(SWAP_HALVES, (first, second), strict=True)]
    found = swap_rows(records, ["m"])["m"]
    assert found["swap_entries"] == 6
    assert list(found["swap_channels"].items()) == [
        ("plugin TaskLwFPlugin: lwf.prev_model", 3), ("weights", 3)]
