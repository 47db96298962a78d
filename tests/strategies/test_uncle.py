"""UnCLe: the chunked hypernetwork and the generated network against hand computations, the
output regulariser against an independent computation inside real training, what learning
keeps and what data-free unlearning moves (measured), and grown Avalanche heads restored."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from avalanche.benchmarks import nc_benchmark
from avalanche.benchmarks.utils import AvalancheDataset
from avalanche.models import MTSimpleMLP
from helpers import make_strategy, predictions
from sklearn.datasets import load_digits
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

from pall_avalanche.catalog import METHOD_INFO
from pall_avalanche.core import UnlearningPlugin
from pall_avalanche.models import TaskIncrementalNet
from pall_avalanche.models.hypernetwork import ChunkedHypernetwork, GeneratedNetwork
from pall_avalanche.requests.streams import UnlearnExperience
from pall_avalanche.strategies.uncle import (
    UnCLe,
    noise_objective,
    parse_widths,
)


def by_hand(state: dict[str, torch.Tensor], embedding: torch.Tensor, size: int,
            depth: int) -> torch.Tensor:
    """The hypernetwork's vector of length ``size`` for ``embedding``, from its state dict:
    chunk j = MLP(embedding ‖ c_j) with ``depth`` hidden ReLU layers, chunks concatenated in
    order and truncated, one chunk at a time."""
    chunks = []
    for c in state["chunk_embeddings"]:
        h = torch.cat([embedding, c]).double()
        for layer in range(depth):
            h = torch.relu(state[f"mlp.{2 * layer}.weight"].double() @ h
                           + state[f"mlp.{2 * layer}.bias"].double())
        chunks.append(state[f"mlp.{2 * depth}.weight"].double() @ h
                      + state[f"mlp.{2 * depth}.bias"].double())
    return torch.cat(chunks)[:size]


def relative_change(after: torch.Tensor, before: torch.Tensor) -> float:
    return float((after - before).norm() / before.norm())


def accuracy(logits: torch.Tensor, bm, task: int) -> float:
    y = torch.tensor(bm.test_stream[task].dataset.targets)
    return 100.0 * float((logits.argmax(1) == y).double().mean())


# -------------------------------------------------------------------- hypernetwork
def test_generated_weights_are_the_chunks_in_order_and_each_sample_uses_its_own_task():
    torch.manual_seed(0)
    hnet = ChunkedHypernetwork(embedding_dim=2, hidden=(5, 3), chunk_size=4, n_chunks=6)
    embeddings = torch.randn(2, 2)
    out = hnet(embeddings, 21)
    assert out.shape == (2, 21)
    for row, e in zip(out, embeddings, strict=True):
        assert torch.allclose(row.double(), by_hand(hnet.state_dict(), e, 21, 2), atol=1e-6)
    with pytest.raises(ValueError, match="25 entries need 7 chunks; the hypernetwork has 6"):
        hnet(embeddings, 25)

    # a network of 3 tasks: backbone 4 -> 3 (12 + 3 entries), head blocks of 2 x 3 (6)
    net = TaskIncrementalNet(nn.Sequential(nn.Flatten(), nn.Linear(4, 3), nn.ReLU()), 3, 3, 2)
    model = GeneratedNetwork(net, hidden=(5,), chunk_size=4, embedding_dim=2)
    assert sorted(model.embeddings) == ["0", "1", "2"] and model.hnet.n_chunks == 6
    for p in net.parameters():              # the templates: never used
        p.data.fill_(float("nan"))
    assert {n for n, _ in model.named_parameters()} == {
        "hnet.mlp.0.weight", "hnet.mlp.0.bias", "hnet.mlp.2.weight", "hnet.mlp.2.bias",
        "embeddings.0", "embeddings.1", "embeddings.2"}
    x = torch.rand(6, 4)
    for task in range(3):
        flat = by_hand(model.hnet.state_dict(), model.embeddings[str(task)].detach(), 21, 1)
        weight, bias, block = flat[:12].view(3, 4), flat[12:15], flat[15:].view(2, 3)
        expected = torch.relu(x.double() @ weight.T + bias) @ block.T
        assert torch.allclose(model(x, task).double(), expected, atol=1e-6), task
        head = model.weights_of(task, model.generate([task])[0])["head.weight"]
        assert (head[[r for r in range(6) if r // 2 != task]] == 0).all()
    labels = torch.tensor([2, 0, 1, 0, 2, 1])
    mixed = model(x, labels)
    for i, task in enumerate(labels.tolist()):
        assert torch.allclose(mixed[i], model(x[i:i + 1], task)[0], atol=1e-6), i


def test_the_noise_objective_is_the_mean_distance_to_fresh_gaussian_draws():
    weights = torch.randn(50, dtype=torch.float64)
    torch.manual_seed(3)
    value = noise_objective(weights, 4)
    torch.manual_seed(3)
    noise = torch.randn(4, 50, dtype=torch.float64)
    assert torch.allclose(value, ((weights - noise) ** 2).sum(1).mean())
    assert not torch.equal(torch.randn(4, 50, dtype=torch.float64), noise)   # fresh each call


# ------------------------------------------------------------------------ learning
class RegulariserCheck(UnlearningPlugin):
    """At every training backward pass: the loss the strategy will differentiate minus the
    cross-entropy of its logits, against β_reg times the mean over the active tasks of
    ``‖h(e_τ) − h*(e_τ)‖²`` computed by hand (:func:`by_hand`, float64), h* the hypernetwork
    saved when the request started."""

    def __init__(self) -> None:
        super().__init__()
        self.worst = 0.0
        self.largest = 0.0
        self.anchor = None

    def before_training_exp(self, strategy, **kwargs):
        self.anchor = copy.deepcopy(strategy.model.hnet.state_dict())

    @torch.no_grad()
    def before_backward(self, strategy, **kwargs):
        model = strategy.model
        tasks = strategy.active_tasks
        if not tasks:
            return
        size = model.size(tasks[0])
        reg = sum((by_hand(model.hnet.state_dict(), model.embeddings[str(t)], size, 2)
                   - by_hand(self.anchor, model.embeddings[str(t)], size, 2)).pow(2).sum()
                  for t in tasks) / len(tasks)
        added = strategy.loss - F.cross_entropy(strategy.mb_output, strategy.mb_y)
        self.worst = max(self.worst, abs(float(added) - strategy.beta_reg * float(reg)))
        self.largest = max(self.largest, float(added))


def test_the_output_regulariser_against_an_independent_computation():
    strategy, bm, _ = make_strategy("uncle", measured=False, epochs=1)
    check = RegulariserCheck()
    strategy.plugins.append(check)
    for exp in bm.train_stream[:3]:
        strategy.train(exp)
    assert check.largest > 1e-3                  # the regulariser was at work (tasks 1, 2)
    assert check.worst < 1e-4 * check.largest


def drift_after_learning_task_1(beta_reg: float):
    strategy, bm, _ = make_strategy("uncle", measured=False, beta_reg=beta_reg)
    strategy.train(bm.train_stream[0])
    model = strategy.model
    with torch.no_grad():
        before = model.generate([0])[0].clone()
    embedding, logits = model.embeddings["0"].detach().clone(), predictions(model, bm, 0)
    strategy.train(bm.train_stream[1])
    groups = strategy.optimizer.param_groups
    assert len(groups) == 1 and {id(p) for p in groups[0]["params"]} == {
        *map(id, model.hnet.parameters()), id(model.embeddings["1"])}
    assert torch.equal(model.embeddings["0"], embedding)          # e_0 frozen
    with torch.no_grad():
        after = model.generate([0])[0]
    return (relative_change(after, before), accuracy(logits, bm, 0),
            accuracy(predictions(model, bm, 0), bm, 0))


def test_learning_a_task_keeps_the_earlier_tasks_generated_weights():
    beta_reg = METHOD_INFO["uncle"].keys["beta_reg"].default
    drift, learned, kept = drift_after_learning_task_1(beta_reg)
    unregularised, _, _ = drift_after_learning_task_1(0.0)
    # measured: task 0's generated weights move by ~6 % (β_reg 0.1), ~19 % without it
    assert drift < 0.1 and drift < unregularised / 2, (drift, unregularised)
    assert learned > 90.0 and kept > learned - 5.0, (learned, kept)


# ---------------------------------------------------------------------- unlearning
class NoData(Exception):
    pass


def test_unlearning_is_data_free_forgets_the_task_and_keeps_the_others_nearly(monkeypatch):
    # digits' setting (configs/digits.yaml): 300 steps; the registered default is the
    # reference's 100
    strategy, bm, _ = make_strategy("uncle", measured=False, unlearn_steps=300)
    for exp in bm.train_stream[:3]:
        strategy.train(exp)
    model = strategy.model
    with torch.no_grad():
        before = [w.clone() for w in model.generate([0, 1, 2])]
    logits = [predictions(model, bm, t) for t in range(3)]

    def refuse(*args, **kwargs):
        raise NoData("a sample was read")

    with monkeypatch.context() as patch:        # no dataset is read, no loader iterated
        patch.setattr(AvalancheDataset, "__getitem__", refuse)
        patch.setattr(DataLoader, "__iter__", refuse)
        strategy.train(UnlearnExperience(2))
    assert strategy.request_statistics() == {"unlearning_steps": 300}
    with torch.no_grad():
        after = model.generate([0, 1, 2])
    # the forgotten task: its generated weights driven to the noise's mean (measured: ~100 %
    # of their norm moved), its predictions at chance
    assert relative_change(after[2], before[2]) > 0.9
    assert float(after[2].norm()) < 0.2 * float(before[2].norm())
    assert accuracy(logits[2], bm, 2) > 90.0
    assert abs(accuracy(predictions(model, bm, 2), bm, 2) - 50.0) < 10.0
    # the remaining tasks: inexact, measured (~7 % of their norm), predictions nearly kept
    for task in (0, 1):
        assert relative_change(after[task], before[task]) < 0.15, task
        now = predictions(model, bm, task)
        assert float((now.argmax(1) == logits[task].argmax(1)).double().mean()) > 0.9, task
        assert abs(accuracy(now, bm, task) - accuracy(logits[task], bm, task)) < 5.0, task
    # later requests unlearn with 0.9 times the previous one's steps (the reference's driver)
    strategy.clock.train_exp_counter, strategy.active_tasks = 5, [0, 1]
    assert strategy.unlearning_steps() == int(int(300 * 0.9) * 0.9) == 243


def test_padded_norms_run_over_the_hypernetwork_s_whole_output(monkeypatch):
    """norms="padded" (the reference's vector): the noise objective sees the unlearned task's
    whole generated output, its last chunk's padding included, and the regulariser every
    generated entry of the remaining tasks; "parameters" (the default) the entries the
    network reads."""
    import pall_avalanche.strategies.uncle as uncle

    lengths, real = {}, uncle.noise_objective
    for norms in ("parameters", "padded"):
        strategy, bm, _ = make_strategy("uncle", measured=False, unlearn_steps=2, norms=norms)
        for exp in bm.train_stream[:2]:
            strategy.train(exp)
        seen = []
        monkeypatch.setattr(uncle, "noise_objective",
                            lambda weights, samples, seen=seen: (seen.append(weights.numel()),
                                                                 real(weights, samples))[1])
        strategy.train(UnlearnExperience(1))
        monkeypatch.setattr(uncle, "noise_objective", real)
        chunk = strategy.model.hnet.chunk_size
        size = strategy.model.size(1)
        _, length, entries = strategy.model.fixed_generation([0, 1], padded=norms == "padded")
        lengths[norms] = (set(seen), length, entries is None)
    assert lengths["parameters"] == ({size}, size, True)
    assert lengths["padded"] == ({math.ceil(size / chunk) * chunk},
                                 math.ceil(size / chunk) * chunk, True)
    assert size % chunk                     # the MLP's vector does not fill its last chunk
    with pytest.raises(ValueError, match="norms='sideways' is invalid; valid: parameters, "
                                         "padded"):
        UnCLe(model=strategy.model, optimizer=strategy.optimizer, norms="sideways")


# ------------------------------------------------------------- grown heads, sizes, keys
class Digits(TensorDataset):
    def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        super().__init__(x, y)
        self.targets = y.tolist()


def test_avalanche_heads_grow_with_their_chunks_and_restore_into_a_model_built_alike():
    digits = load_digits()
    x, y = torch.tensor(digits.data, dtype=torch.float32) / 16.0, torch.tensor(digits.target)
    bm = nc_benchmark(Digits(x[:600], y[:600]), Digits(x[1400:], y[1400:]), n_experiences=4,
                      task_labels=True, seed=0, fixed_class_order=list(range(10)),
                      per_exp_classes={0: 4})

    def build() -> UnCLe:
        torch.manual_seed(0)
        model = MTSimpleMLP(input_size=64, hidden_size=32)
        return UnCLe(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.05),
                     train_mb_size=32, train_epochs=1, chunk_size=128)

    strategy = build()
    chunks = strategy.model.hnet.n_chunks
    for exp in bm.train_stream[:2]:
        strategy.train(exp)
    model = strategy.model
    assert sorted(model.embeddings) == ["0", "1"]
    shared = 64 * 32 + 32
    assert [model.size(t) for t in (0, 1)] == [shared + 4 * 33, shared + 6 * 33]
    assert model.hnet.n_chunks == math.ceil((shared + 6 * 33) / 128) > chunks
    restored = build()
    restored.restore_checkpoint_state(strategy.checkpoint_state())
    x_test = torch.stack([bm.test_stream[1].dataset[i][0] for i in range(20)])
    model.eval(), restored.model.eval()                 # (MTSimpleMLP has dropout)
    for task in (0, 1):
        assert torch.equal(restored.model(x_test, task), model(x_test, task)), task


def test_size_keys_and_refusals():
    strategy, _, _ = make_strategy("uncle", measured=False)
    hnet = strategy.model.hnet
    h = (2 * 32 * 64 + 64) + (64 * 64 + 64) + (64 * 2048 + 2048) + hnet.n_chunks * 32
    assert hnet.n_chunks == math.ceil((64 * 256 + 256 + 256 * 256 + 256 + 2 * 256) / 2048)
    assert strategy.inference_size(1) == (h + 32, 0)
    assert strategy.inference_size(5) == (h + 5 * 32, 0)
    assert parse_widths("128,256,512") == (128, 256, 512)
    model = TaskIncrementalNet(nn.Linear(64, 8), 8, 2, 2)
    for setting, message in [
            ({"hnet_hidden": "64,x"}, r"hnet_hidden='64,x' is invalid; valid: comma-separated "
                                      r"positive layer widths"),
            ({"hnet_hidden": "64,0"}, r"hnet_hidden='64,0' is invalid"),
            ({"chunk_size": 0}, r"chunk_size=0 is invalid; valid: an integer >= 1"),
            ({"noise_samples": 2.5}, r"noise_samples=2.5 is invalid; valid: an integer >= 1"),
            ({"beta_reg": -1.0}, r"beta_reg=-1.0 is invalid; valid: a finite number >= 0"),
            ({"gamma_forget": float("nan")}, r"gamma_forget=nan is invalid")]:
        with pytest.raises(ValueError, match=message) as err:
            UnCLe(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                  **setting)
        assert "\n" not in str(err.value)
