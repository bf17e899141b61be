"""Activation functions by the names configs use."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def _gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    # The tanh approximation of GELU (Hendrycks & Gimpel, 2016, sec. 2), used by GPT-2 and by
    # checkpoints that say "gelu_new"; torch computes the same formula natively.
    return F.gelu(x, approximate="tanh")


def _gelu_fast(x: torch.Tensor) -> torch.Tensor:
    # Same tanh approximation written with x*x*x; kept separate because the rounding differs.
    return 0.5 * x * (1.0 + torch.tanh(x * 0.7978845608028654 * (1.0 + 0.044715 * x * x)))


def _quick_gelu(x: torch.Tensor) -> torch.Tensor:
    return x * torch.sigmoid(1.702 * x)


def _gelu_erf(x: torch.Tensor) -> torch.Tensor:
    # Exact GELU spelled out (transformers' "gelu_python"); F.gelu rounds a little differently.
    return x * 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0)))


def _gelu_tanh_formula(x: torch.Tensor) -> torch.Tensor:
    # The tanh approximation spelled out with x**3 ("gelu_accurate", "gelu_python_tanh").
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3))))


def _gelu_clipped(x: torch.Tensor) -> torch.Tensor:
    # GELU clipped to [-10, 10], which keeps int8-quantized activations in range ("gelu_10").
    return torch.clip(F.gelu(x), -10.0, 10.0)


def _laplace(x: torch.Tensor, mu: float = 0.707107, sigma: float = 0.282095) -> torch.Tensor:
    # The Laplace-CDF gate of MEGA (Ma et al., 2022, sec. 3.1), a cheap stand-in for GELU's.
    return 0.5 * (1.0 + torch.erf((x - mu) / (sigma * math.sqrt(2.0))))


def _relu_squared(x: torch.Tensor) -> torch.Tensor:
    # Primer's squared ReLU (So et al., 2021, sec. 3).
    return torch.square(F.relu(x))


def _sqrt_softplus(x: torch.Tensor) -> torch.Tensor:
    return F.softplus(x).sqrt()


def _identity(x: torch.Tensor) -> torch.Tensor:
    return x


_ACTIVATIONS = {
    "gelu": F.gelu,  # exact, erf-based: what the original BERT release uses
    "gelu_new": _gelu_tanh,
    "gelu_pytorch_tanh": _gelu_tanh,
    "gelu_fast": _gelu_fast,
    "quick_gelu": _quick_gelu,
    "relu": F.relu,
    "silu": F.silu,
    "swish": F.silu,
    "tanh": torch.tanh,
    # Names transformers also accepts, rarer in encoder checkpoints.
    "gelu_python": _gelu_erf,
    "gelu_python_tanh": _gelu_tanh_formula,
    "gelu_accurate": _gelu_tanh_formula,
    "gelu_10": _gelu_clipped,
    "mish": F.mish,
    "relu6": F.relu6,
    "relu2": _relu_squared,
    "leaky_relu": F.leaky_relu,  # slope 0.01, torch's and transformers' default
    "hardswish": F.hardswish,
    "sigmoid": torch.sigmoid,
    "laplace": _laplace,
    "sqrtsoftplus": _sqrt_softplus,
    "linear": _identity,
}


# In-place versions, for inference: they overwrite their input instead of allocating a tensor
# as large as the feed-forward's widest one (on CPU, touching fresh memory cost ~3x the GELU
# itself, measured on (4096, 3072) fp32). Composite formulas have none.
def _gelu_(x: torch.Tensor) -> torch.Tensor:
    return torch.ops.aten.gelu_(x)


def _gelu_tanh_(x: torch.Tensor) -> torch.Tensor:
    return torch.ops.aten.gelu_(x, approximate="tanh")


def _silu_(x: torch.Tensor) -> torch.Tensor:
    return F.silu(x, inplace=True)


_IN_PLACE = {
    "gelu": _gelu_,
    "gelu_new": _gelu_tanh_,
    "gelu_pytorch_tanh": _gelu_tanh_,
    "relu": torch.relu_,
    "silu": _silu_,
    "swish": _silu_,
    "tanh": torch.tanh_,
}

assert math.isclose(0.7978845608028654, math.sqrt(2 / math.pi))


def activation(name: str):
    """The function for a config's `hidden_act` (names are validated by the config)."""
    return _ACTIVATIONS[name]


def activation_in_place(name: str):
    """The in-place form of `activation(name)` (same numbers), or None where there is none."""
    return _IN_PLACE.get(name)


# Gradients with respect to the activation's input, written into `out`, for training code that
# reuses memory it already holds (feedforward.py): the same kernels autograd calls. Named
# functions, not lambdas: modules hold them, and a pickled model (torch.save(model), process
# pools) refers to functions by name.
def _gelu_backward_into(grad, pre, out):
    return torch.ops.aten.gelu_backward.grad_input(grad, pre, grad_input=out)


def _gelu_tanh_backward_into(grad, pre, out):
    return torch.ops.aten.gelu_backward.grad_input(grad, pre, approximate="tanh", grad_input=out)


def _relu_backward_into(grad, pre, out):
    return torch.ops.aten.threshold_backward.grad_input(grad, pre, 0, grad_input=out)


def _silu_backward_into(grad, pre, out):
    return torch.ops.aten.silu_backward.grad_input(grad, pre, grad_input=out)


_BACKWARD_INTO = {
    "gelu": _gelu_backward_into,
    "gelu_new": _gelu_tanh_backward_into,
    "gelu_pytorch_tanh": _gelu_tanh_backward_into,
    "relu": _relu_backward_into,
    "silu": _silu_backward_into,
    "swish": _silu_backward_into,
}


def activation_backward_into(name: str):
    """(grad, pre, out) -> out = d act(pre) / d pre * grad, or None where there is none."""
    return _BACKWARD_INTO.get(name)
