"""Avalanche on its own terms: its canonical task-incremental set-ups (original class ids, heads
grown to each task's classes, tasks of different sizes), mixed-task mini-batches from its
``ReplayPlugin``, ``train(list)`` and one refusal for class-incremental input, every method,
real training on scikit-learn's digits through Avalanche's own ``nc_benchmark``."""

from __future__ import annotations

import pytest
import torch
from avalanche.benchmarks import nc_benchmark
from avalanche.evaluation.metrics import accuracy_metrics
from avalanche.models import MTSimpleMLP, MultiHeadClassifier, SimpleMLP, as_multitask
from avalanche.training.plugins import EvaluationPlugin, ReplayPlugin
from helpers import BUILT_IN_METHODS, FAST_CONFIG, default_suite_subset, method_kwargs
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import TensorDataset

from pall_avalanche.core import UnlearningPlugin
from pall_avalanche.models import TaskIncrementalNet
from pall_avalanche.models.multitask import TaskIncrementalRequired
from pall_avalanche.requests.streams import UnlearnExperience
from pall_avalanche.strategies import METHODS, make_optimizer

#: Methods that split every layer over T a priori: they need n_tasks with an Avalanche model.
NEEDS_T = {"packnet", "static_sparse", "dynamic_sparse"}


class Digits(TensorDataset):
    def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        super().__init__(x, y)
        self.targets = y.tolist()


def digits_benchmark(*, per_exp_classes: dict | None = None, task_labels: bool = True,
                     n_experiences: int = 5):
    """Digits through Avalanche's ``nc_benchmark`` as Avalanche's examples call it: task
    labels, original class ids (no remapping), classes in numerical order."""
    digits = load_digits()
    x = torch.tensor(digits.data, dtype=torch.float32) / 16.0
    y = torch.tensor(digits.target)
    return nc_benchmark(Digits(x[:1400], y[:1400]), Digits(x[1400:], y[1400:]),
                        n_experiences=n_experiences, task_labels=task_labels, seed=0,
                        fixed_class_order=list(range(10)), per_exp_classes=per_exp_classes)


def four_two_two_two():
    """Tasks of 4, 2, 2, 2 classes with their original ids: {0..3}, {4,5}, {6,7}, {8,9}."""
    return digits_benchmark(per_exp_classes={0: 4}, n_experiences=4)


def no_dropout_model() -> nn.Module:
    torch.manual_seed(0)
    return as_multitask(SimpleMLP(num_classes=2, input_size=64, hidden_size=64, drop_rate=0.0),
                        "classifier")


def build(method: str, model: nn.Module, *, n_tasks: int | None = None, plugins=(),
          evaluator=None, eval_every: int = -1, **overrides):
    """``method`` as an Avalanche user builds a strategy: their model, their optimizer."""
    config = {**FAST_CONFIG, "alpha": 0.3, "lr": 0.01 if method == "lsf" else 0.05,
              **overrides}
    spec = METHODS[method]
    kwargs = {"evaluator": evaluator} if evaluator is not None else {}
    return spec.strategy(
        model=model, optimizer=make_optimizer(config, model.parameters()),
        train_mb_size=32, train_epochs=config["epochs"], eval_mb_size=64,
        n_tasks=n_tasks if n_tasks is not None or method not in NEEDS_T else 4,
        plugins=list(plugins), eval_every=eval_every, **kwargs,
        **method_kwargs(method, config))


@torch.no_grad()
def logits_on_test(strategy, bm, task: int) -> torch.Tensor:
    model = strategy.model
    model.eval()
    x = torch.stack([bm.test_stream[task].dataset[i][0]
                     for i in range(len(bm.test_stream[task].dataset))])
    out = model(x, task)
    model.train()
    return out


def accuracy(logits: torch.Tensor, bm, task: int) -> float:
    y = torch.tensor(bm.test_stream[task].dataset.targets)
    return 100.0 * float((logits.argmax(1) == y).double().mean())


# ------------------------------------------------------------ heads as Avalanche sizes them
@pytest.mark.parametrize("method", default_suite_subset(BUILT_IN_METHODS))
def test_every_method_learns_original_class_ids_with_tasks_of_4_2_2_2_classes(method):
    """Avalanche's ``MTSimpleMLP`` as it is (initial_out_features=2, no n_tasks), tasks of 4,
    2, 2, 2 classes with their original ids: every head grows to its task's classes, the
    units a task does not use are masked, and Avalanche's own accuracy metric reads the
    logits (the multihead.py example loop: train each experience, evaluate the stream)."""
    bm = four_two_two_two()
    torch.manual_seed(0)
    evaluator = EvaluationPlugin(accuracy_metrics(experience=True), loggers=[])
    strategy = build(method, MTSimpleMLP(input_size=64, hidden_size=128),
                     evaluator=evaluator, epochs=3)
    for exp in bm.train_stream:
        strategy.train(exp)
    results = strategy.eval(bm.test_stream)
    classifier = next(m for m in strategy.model.modules() if isinstance(m, MultiHeadClassifier))
    # Independent's heads, and CLPU-DER++'s of temporary tasks, are in each task's own model
    if method not in ("independent", "clpu_derpp"):
        assert {t: classifier.classifiers[str(t)].classifier.out_features
                for t in range(4)} == {0: 4, 1: 6, 2: 8, 3: 10}
        assert classifier.active_units_T1.tolist() == [0, 0, 0, 0, 1, 1]
    for task, classes in enumerate([range(4), range(4, 6), range(6, 8), range(8, 10)]):
        logits = logits_on_test(strategy, bm, task)
        assert (logits[:, [c for c in range(logits.shape[1]) if c not in classes]]
                == -1000).all(), task
        avalanche_acc = results[f"Top1_Acc_Exp/eval_phase/test_stream/Task{task:03}/"
                                f"Exp{task:03}"]
        assert abs(100 * avalanche_acc - accuracy(logits, bm, task)) < 1e-6
        assert avalanche_acc > 0.6, (method, task, avalanche_acc)   # chance: 0.25 / 0.5


@pytest.mark.parametrize("kind", ["MTSimpleMLP", "TaskIncrementalNet"])
def test_pall_never_forgets_and_unlearns_exactly_with_grown_heads(kind):
    bm = four_two_two_two()
    torch.manual_seed(0)
    if kind == "MTSimpleMLP":
        model = MTSimpleMLP(input_size=64, hidden_size=128)
    else:
        model = TaskIncrementalNet(nn.Sequential(nn.Linear(64, 128), nn.ReLU()), 128, 4, 4)
    strategy = build("pall", model, epochs=3, n_retrain_iters=10)
    learned = {}
    for exp in bm.train_stream:
        strategy.train(exp)
        for task, logits in learned.items():            # F_l = 0: to the bit
            assert torch.equal(logits_on_test(strategy, bm, task), logits), task
        learned[exp.task_label] = logits_on_test(strategy, bm, exp.task_label)
        assert accuracy(learned[exp.task_label], bm, exp.task_label) > 60
    net = strategy.model
    weights = {n: w.detach().clone() for n, w in net.named_weights()}
    promised = strategy.redraw_set(1)
    strategy.train(UnlearnExperience(1))
    # only promised entries moved; task 1's own output returned to its never-learned state
    for (name, w), entries in zip(net.named_weights(), promised.bools().values(), strict=True):
        assert torch.equal(w[~entries], weights[name][~entries]), name
    assert 1 not in net.masks and 1 not in strategy.memory.buffers
    if kind == "MTSimpleMLP":
        head = net.net.classifier
        assert not head.active_units_T1.any()
    else:
        assert net.net.task_classes(1) == (0, 1, 2, 3) and "classes_T1" not in net.net._buffers
    assert torch.equal(logits_on_test(strategy, bm, 0), learned[0])   # learned before t: intact


@pytest.mark.parametrize("method", ["independent", "static_sparse"])
def test_exact_isolation_methods_leave_the_others_bit_identical_with_grown_heads(method):
    bm = four_two_two_two()
    torch.manual_seed(0)
    strategy = build(method, MTSimpleMLP(input_size=64, hidden_size=128), epochs=2)
    for exp in bm.train_stream:
        strategy.train(exp)
    before = {t: logits_on_test(strategy, bm, t) for t in (0, 2, 3)}
    strategy.train(UnlearnExperience(1))
    for task, logits in before.items():
        assert torch.equal(logits_on_test(strategy, bm, task), logits), task


def test_heads_grow_in_training_only_and_restore_into_a_model_built_alike():
    bm = four_two_two_two()
    torch.manual_seed(0)
    strategy = build("pall", MTSimpleMLP(input_size=64, hidden_size=128), epochs=1)
    classifier = strategy.model.net.classifier
    strategy.eval(bm.test_stream)                   # no head appears
    assert sorted(classifier.classifiers) == ["0"]
    assert (logits_on_test(strategy, bm, 2) == -1000).all()       # a task without a head
    for exp in bm.train_stream[:3]:
        strategy.train(exp)
    state = strategy.checkpoint_state()
    torch.manual_seed(1)
    restored = build("pall", MTSimpleMLP(input_size=64, hidden_size=128), epochs=1)
    restored.restore_checkpoint_state(state)
    for task in range(3):
        assert torch.equal(logits_on_test(restored, bm, task), logits_on_test(strategy, bm, task))
    net = TaskIncrementalNet(nn.Linear(64, 8), 8, 4, 4)
    net.set_task_classes(1, [4, 5])
    twin = TaskIncrementalNet(nn.Linear(64, 8), 8, 4, 4)
    twin.load_state_dict(net.state_dict())
    assert twin.task_classes(1) == (4, 5) and twin.task_classes(0) == (0, 1, 2, 3)


def test_a_task_with_more_classes_than_a_block_is_refused_in_one_line():
    bm = four_two_two_two()
    net = TaskIncrementalNet(nn.Linear(64, 8), 8, 4, 2)
    strategy = build("sequential", net)
    with pytest.raises(ValueError, match=r"task 0 has classes \[0, 1, 2, 3\]: 4 classes, more "
                       r"than the 2 units of a head block .* classes_per_task=4 or more"):
        strategy.train(bm.train_stream[0])


def test_without_n_tasks_the_buffer_rebalances_by_dropping_samples_only():
    bm = digits_benchmark()
    torch.manual_seed(0)
    strategy = build("derpp", MTSimpleMLP(input_size=64, hidden_size=128), buffer_size=60,
                     epochs=1)
    memory = strategy.memory
    strategy.train(bm.train_stream[0])
    first = memory.buffers[0][0].clone()
    assert len(first) == 60
    strategy.train(bm.train_stream[1])
    assert [len(memory.buffers[t][0]) for t in (0, 1)] == [30, 30]
    strategy.train(bm.train_stream[2])
    assert [len(memory.buffers[t][0]) for t in (0, 1, 2)] == [20, 20, 20]
    kept = memory.buffers[0][0]
    assert all((first == row).all(1).any() for row in kept)          # a subset of the first
    for task in range(3):                                           # class-balanced
        labels = memory.buffers[task][1].tolist()
        assert sorted(set(labels)) == [2 * task, 2 * task + 1]
        assert labels.count(2 * task) == 10


def test_methods_that_split_layers_over_t_need_it_with_a_growing_model():
    for method in sorted(NEEDS_T):
        model = MTSimpleMLP(input_size=64)
        spec = METHODS[method]
        config = {**FAST_CONFIG, "alpha": 0.3}
        with pytest.raises(ValueError, match=r"splits every layer over the T tasks a priori.*"
                           r"pass n_tasks=T") as err:
            spec.strategy(model=model, optimizer=make_optimizer(config, model.parameters()),
                          **method_kwargs(method, config))
        assert "\n" not in str(err.value)


# --------------------------------------------------------------- per-sample task routing
class OwnTaskForward(UnlearningPlugin):
    """After every training forward pass: each sample's logits against its own task's
    forward pass of the same model (train mode), and the tasks each mini-batch held."""

    def __init__(self) -> None:
        super().__init__()
        self.worst = 0.0
        self.tasks: set[int] = set()

    @torch.no_grad()
    def after_forward(self, strategy, **kwargs) -> None:
        labels = strategy.mb_task_id
        for task in labels.unique().tolist():
            rows = labels == task
            own = strategy.model(strategy.mb_x[rows], task)
            got = strategy.mb_output[rows, :own.shape[1]]
            self.worst = max(self.worst, float((got - own).abs().max()))
            # (LSF's forward pass also holds the mixed samples: other batch shapes, so the
            # same logits up to floating-point reduction order)
            self.tasks.add(task)


@pytest.mark.parametrize("method", BUILT_IN_METHODS)
def test_replayed_samples_go_through_their_own_task(method):
    bm = digits_benchmark()
    check = OwnTaskForward()
    strategy = build(method, no_dropout_model(), n_tasks=5 if method in NEEDS_T else None,
                     plugins=[ReplayPlugin(mem_size=40), check], epochs=1)
    for exp in bm.train_stream[:3]:
        strategy.train(exp)
    assert check.tasks == {0, 1, 2}                    # earlier tasks were replayed
    assert check.worst < 1e-5, method


def test_exact_methods_stay_exact_with_replay_and_refuse_unlearned_samples():
    bm = digits_benchmark()
    for method in ("pall", "clpu_derpp", "independent"):
        strategy = build(method, no_dropout_model(), plugins=[ReplayPlugin(mem_size=40)],
                         epochs=1, n_retrain_iters=5)
        strategy.train(bm.train_stream[0])
        learned0 = logits_on_test(strategy, bm, 0)
        strategy.train(bm.train_stream[1])              # task 0 replayed: it stays intact
        assert torch.equal(logits_on_test(strategy, bm, 0), learned0), method
        strategy.train(bm.train_stream[2])
        others = {t: logits_on_test(strategy, bm, t) for t in (0, 2)}
        strategy.train(UnlearnExperience(1))
        if method == "independent":                     # the others bit-identical
            for task, logits in others.items():
                assert torch.equal(logits_on_test(strategy, bm, task), logits)
            untrained = logits_on_test(strategy, bm, 1)
            strategy.train(bm.train_stream[3])          # task 1 replayed: trains nothing
            assert torch.equal(logits_on_test(strategy, bm, 1), untrained)
        else:                                           # learned before task 1: intact
            assert torch.equal(logits_on_test(strategy, bm, 0), others[0])
            with pytest.raises(ValueError, match=r"a learning mini-batch of task 3 holds "
                               r"samples of task\(s\) \[1\], which are not learned .* "
                               r"\(ReplayPlugin\)") as err:
                strategy.train(bm.train_stream[3])
            assert "\n" not in str(err.value)


def test_clpu_merges_temporary_tasks_of_an_avalanche_model_with_grown_heads():
    # MTSimpleMLP without n_tasks, original class ids: a temporary task's head exists only in
    # its side network unless the main network is adapted too; merging it must leave the task
    # learned in the main network (not at chance, not an out-of-range target)
    bm = four_two_two_two()
    torch.manual_seed(0)
    strategy = build("clpu_derpp", MTSimpleMLP(input_size=64, hidden_size=128), epochs=3,
                     lr=0.01)
    strategy.train([bm.train_stream[0], bm.train_stream[1]])
    side = {t: accuracy(logits_on_test(strategy, bm, t), bm, t) for t in (0, 1)}
    strategy.make_permanent(1)
    strategy.make_permanent(0)
    assert strategy.permanent_tasks == [1, 0] and not strategy.model.side
    for task, chance in ((0, 25.0), (1, 50.0)):
        merged = accuracy(logits_on_test(strategy, bm, task), bm, task)
        assert side[task] > 80 and merged > chance + 25, (task, side[task], merged)


# ------------------------------------------------------------------ stream calls
class Calls(UnlearningPlugin):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def before_training(self, strategy, **kwargs):
        self.calls.append("before_training")

    def after_training(self, strategy, **kwargs):
        self.calls.append("after_training")

    def after_training_exp(self, strategy, **kwargs):
        self.calls.append(f"learned {strategy.experience.task_label}")

    def after_unlearning(self, strategy, task, **kwargs):
        self.calls.append(f"unlearned {task}")

    def before_eval_exp(self, strategy, **kwargs):
        self.calls.append(f"eval {strategy.experience.task_label}")


def test_train_of_a_list_fires_the_training_events_once_and_evaluates_the_list():
    bm = digits_benchmark()
    stream = [bm.train_stream[0], bm.train_stream[1], UnlearnExperience(0),
              bm.train_stream[2]]
    calls = Calls()
    strategy = build("pall", no_dropout_model(), plugins=[calls], epochs=2, eval_every=0)
    strategy.train(stream)
    evals = ["eval 0", "eval 1", "eval 2"]     # the list's learning experiences
    assert calls.calls == ["before_training", *evals,               # Avalanche's initial eval
                           "learned 0", *evals, "learned 1", *evals, "unlearned 0",
                           "learned 2", *evals, "after_training"]
    # the same parameters as the experience-by-experience loop
    one_by_one = build("pall", no_dropout_model(), epochs=2)
    for exp in stream:
        one_by_one.train(exp)
    for (name, a), b in zip(strategy.model.named_parameters(),
                            one_by_one.model.parameters(), strict=True):
        assert torch.equal(a, b), name
    masks, other = strategy.model.mask_state_dict(), one_by_one.model.mask_state_dict()
    assert masks.keys() == other.keys() == {"1", "2"}
    assert all(torch.equal(masks[task], other[task]) for task in masks)


def test_a_list_that_cannot_be_processed_is_refused_before_anything_trains():
    bm = digits_benchmark()
    strategy = build("sequential", no_dropout_model())
    weights = [p.detach().clone() for p in strategy.model.parameters()]
    with pytest.raises(ValueError, match=r"cannot unlearn task 2: it is not learned "
                       r"\(active tasks \[0, 1\]\)"):
        strategy.train([bm.train_stream[0], bm.train_stream[1], UnlearnExperience(2)])
    assert all(torch.equal(p, w) for p, w in zip(strategy.model.parameters(), weights,
                                                 strict=True))


# ------------------------------------------------------------ class-incremental input
def test_every_method_refuses_class_incremental_input_with_the_same_line():
    class_incremental = digits_benchmark(task_labels=False)
    messages = set()
    for method in BUILT_IN_METHODS:
        with pytest.raises(TaskIncrementalRequired) as err:          # a single-head model
            build(method, SimpleMLP(num_classes=10, input_size=64), n_tasks=5)
        messages.add(str(err.value))
        strategy = build(method, MTSimpleMLP(input_size=64), n_tasks=5)
        weights = [p.detach().clone() for p in strategy.model.parameters()]
        for call in (class_incremental.train_stream[0], list(class_incremental.train_stream)):
            with pytest.raises(TaskIncrementalRequired) as err:       # before the first step
                strategy.train(call)
            messages.add(str(err.value))
        assert all(torch.equal(p, w) for p, w in zip(strategy.model.parameters(), weights,
                                                     strict=True)), method
    assert len(messages) == 2, messages         # one line per input, whatever the method
    for message in messages:
        assert message.startswith("task-incremental: needs task labels and a multi-head "
                                  "model; got ") and "\n" not in message
