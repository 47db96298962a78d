"""What the unlearning template keeps between requests (checkpoint state), how large its model
is for inference, and what a method says of itself."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from pall_avalanche.checkpoint import Stateful, state_to
from pall_avalanche.models import count_parameters

__all__ = ["TemplateState"]


class TemplateState:
    """Checkpoint state, inference size and a method's declarations."""

    def _stateful_plugins(self) -> dict[str, Stateful]:
        """A stable name → every plugin, and every metric of the evaluator, with checkpoint
        attributes: the class's qualified name, with ``#2``, ``#3`` ... for further instances
        of one class (as Lightning keys callback state), so adding, removing or reordering
        other plugins keeps a checkpoint loadable; stateless ones (a progress or kill-switch
        plugin) may differ between the saved and the resumed run."""
        def stateful(items: Iterable, prefix: str) -> dict[str, Stateful]:
            out: dict[str, Stateful] = {}
            for p in items:
                if isinstance(p, Stateful) and p.all_checkpoint_attributes():
                    name = f"{prefix}{type(p).__module__}.{type(p).__qualname__}"
                    count = sum(key == name or key.startswith(f"{name}#") for key in out)
                    out[f"{name}#{count + 1}" if count else name] = p
            return out

        return {**stateful(self.plugins, ""),
                **stateful(getattr(self.evaluator, "metrics", ()), "metric ")}

    def checkpoint_state(self) -> dict:
        """The strategy's state between requests, as plain data: ``model`` (its
        ``state_dict``), ``strategy`` (:meth:`state_dict`) and ``plugins`` (stable name →
        ``state_dict``, the evaluator's stateful metrics included: :meth:`_stateful_plugins`)."""
        return {"model": self.model.state_dict(), "strategy": self.state_dict(),
                "plugins": {key: p.state_dict() for key, p in self._stateful_plugins().items()}}

    def restore_checkpoint_state(self, state: dict) -> None:
        """Restore :meth:`checkpoint_state` into a strategy built like the saved one, on the
        strategy's device (the model moves there first and every tensor of ``state`` goes
        there, whichever device it was saved from or loaded onto), so that everything the
        strategy keeps and everything it builds afterwards share one device.

        :param state: what :meth:`checkpoint_state` returned.
        """
        plugins = self._stateful_plugins()
        if sorted(plugins) != sorted(state["plugins"]):
            raise ValueError(f"the checkpoint's plugins {sorted(state['plugins'])} differ from "
                             f"this strategy's {sorted(plugins)}")
        self.model.to(self.device)
        state = state_to(state, self.device)
        self.model.load_state_dict(state["model"])
        self.load_state_dict(state["strategy"])
        for key, plugin in plugins.items():
            plugin.load_state_dict(state["plugins"][key])

    def inference_size(self, n_tasks: int | None = None) -> tuple[int, int]:
        """(float parameters, mask bits) needed for inference.

        :param n_tasks: the size with that many active tasks (default: the active ones now);
            a dense model's size does not depend on it.
        """
        return count_parameters(self.model), 0

    def synchronize(self) -> None:
        """Wait for queued device work (for wall-clock timing)."""
        if torch.device(self.device).type == "cuda":
            torch.cuda.synchronize(self.device)

    # ------------------------------------------------------------ declarations
    @classmethod
    def retrains_from_scratch(cls) -> bool:
        """Whether unlearning re-draws the whole model and retrains it from what remains
        (ER (Retraining)): the other tasks' predictions change, no parameter survives. The
        contract check of exact methods (:mod:`pall_avalanche.check_method`) asks. Default:
        no."""
        return False

    def stores_logits(self) -> bool:
        """Whether the method keeps logits computed by the model (DER++ and PALL's buffers):
        an audit of exact unlearning checks that none was computed with an unlearned task's
        weights. Default: no."""
        return False
