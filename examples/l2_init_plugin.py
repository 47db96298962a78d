"""A method and a benchmark of one's own, run by the paper's scripts without touching the
package:

    python benchmarks/table1.py --plugin examples/l2_init_plugin.py --methods l2_init,sequential
    python benchmarks/table1.py --plugin examples/l2_init_plugin.py --benchmark digits_in_order
    python benchmarks/audit.py --plugin examples/l2_init_plugin.py --quick \
        --methods l2_init,independent
    python -m pall_avalanche.check_method l2_init --plugin examples/l2_init_plugin.py

- ``l2_init``: fine-tuning with an L2 pull of every weight towards its initial value (its
  declared key ``l2_strength``; ``--set l2_strength=0.5``). Unlearning a
  task re-draws its head rows; the shared weights keep what they learned (inexact).
- ``digits_in_order``: scikit-learn's digits as Avalanche's own ``nc_benchmark`` builds it,
  the classes in numerical order (task t = digits 2t and 2t + 1), each task labelled from 0.
"""

from __future__ import annotations

import torch
from avalanche.benchmarks import nc_benchmark
from sklearn.datasets import load_digits
from torch.utils.data import TensorDataset

from pall_avalanche import Key, Method, register_benchmark, register_method
from pall_avalanche.strategies import UnlearningTemplate


class L2Init(UnlearningTemplate):
    """Fine-tuning plus ``l2_strength · Σ (w − w₀)²`` over every parameter, w₀ its value when
    the strategy was built; unlearning task t re-draws t's head rows to w₀."""

    checkpoint_attributes = ("initial",)

    def __init__(self, *, l2_strength: float, **kwargs) -> None:
        super().__init__(**kwargs)
        self.l2_strength = l2_strength
        self.initial = [p.detach().clone() for p in self.model.parameters()]

    def _before_backward(self, **kwargs) -> None:
        self.loss = self.loss + self.l2_strength * sum(
            ((p - p0.to(p.device)) ** 2).sum()
            for p, p0 in zip(self.model.parameters(), self.initial, strict=True))
        super()._before_backward(**kwargs)

    @torch.no_grad()
    def _unlearn(self, task: int) -> None:
        rows = self.model.head_rows(task)
        head = dict(zip((n for n, _ in self.model.named_parameters()), self.initial,
                        strict=True))["head.weight"]
        self.model.head.weight[rows] = head[rows].to(self.model.head.weight.device)


register_method(Method("l2_init", L2Init, exact=False, label="L2-init", keys={
    "l2_strength": Key(0.01, "weight of the L2 pull towards the initial weights", low=0)}))


class Digits(TensorDataset):
    """Images and labels as a torch dataset with the ``targets`` Avalanche reads."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        super().__init__(x, y)
        self.targets = y.tolist()


def digits_in_order(*, seed: int, n_tasks: int, root, train_per_task, download):
    """Digits (the first 80 % of the images for training, the rest for testing), split by
    Avalanche's ``nc_benchmark`` in numerical class order with task labels."""
    digits = load_digits()
    x = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
    y = torch.tensor(digits.target)
    cut = int(0.8 * len(y))
    return nc_benchmark(Digits(x[:cut], y[:cut]), Digits(x[cut:], y[cut:]),
                        n_experiences=n_tasks, task_labels=True, seed=seed,
                        fixed_class_order=list(range(10)), class_ids_from_zero_in_each_exp=True)


register_benchmark("digits_in_order", digits_in_order, n_classes=10, default_n_tasks=5)
