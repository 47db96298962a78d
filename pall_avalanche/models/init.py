"""The initialisation distribution φ of the paper: every module's own ``reset_parameters``
(PyTorch's Kaiming-uniform with a=√5 for Conv2d/Linear weights, U(±1/√fan_in) for biases)."""

from __future__ import annotations

from torch import nn

__all__ = ["reinitialize_"]


def reinitialize_(module: nn.Module) -> nn.Module:
    """Re-draw every parameter of ``module`` from its initialisation distribution, in place."""
    for sub in module.modules():
        reset = getattr(sub, "reset_parameters", None)
        if callable(reset):
            reset()
    return module
