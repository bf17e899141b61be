"""Position-wise feed-forward network: up-projection, activation, down-projection
(Vaswani et al., 2017, sec. 3.3). Shapes: (B, T, H) -> (B, T, I) -> (B, T, H).

In inference (no autograd recording), the (tokens, I) intermediate, the widest tensor of a
block, is written into one buffer that every layer of a forward reuses (`shared_intermediate`),
and the activation runs in place on it: on CPU a fresh tensor that large is page-faulted in on
first touch, which costs more than the activation itself.
"""

from __future__ import annotations

import contextlib
import contextvars

import torch
from torch import nn

from ..config import EncoderConfig
from .activations import activation, activation_in_place

# Per thread (and per asyncio task): the buffers of the forward running there, by shape.
_buffers: contextvars.ContextVar[dict | None] = contextvars.ContextVar("ffn_buffers", default=None)


@contextlib.contextmanager
def shared_intermediate():
    """Within it, feed-forward layers that run without autograd share one intermediate buffer
    (the encoder opens it around its stack of blocks); it is dropped on exit."""
    token = _buffers.set({})
    try:
        yield
    finally:
        _buffers.reset(token)


class FeedForward(nn.Module):
    def __init__(self, config: EncoderConfig):
        super().__init__()
        self.up = nn.Linear(config.hidden_size, config.intermediate_size)
        self.act = activation(config.hidden_act)
        self.act_in_place = activation_in_place(config.hidden_act)
        self.down = nn.Linear(config.intermediate_size, config.hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        buffer = self._buffer(x)
        if buffer is not None:
            h = torch.addmm(self.up.bias, x.reshape(-1, x.shape[-1]), self.up.weight.t(), out=buffer)
            h = self.act_in_place(h).view(*x.shape[:-1], -1)  # (B, T, I)
        else:
            h = self.up(x)  # (B, T, I)
            if self.act_in_place is not None and not h.requires_grad:
                h = self.act_in_place(h)  # nothing records h for a backward pass: reuse its memory
            else:
                h = self.act(h)
        return self.down(h)

    def _buffer(self, x: torch.Tensor) -> torch.Tensor | None:
        """The shared (tokens, I) buffer, when this call may write into it: no autograd, a plain
        up-projection with a bias, an in-place activation, no autocast (an out= matmul would not
        be cast) and not while torch.compile traces (it fuses this itself)."""
        if (torch.compiler.is_compiling() or torch.is_grad_enabled() or self.act_in_place is None
                or type(self.up) is not nn.Linear or self.up.bias is None
                or torch.is_autocast_enabled(x.device.type)):
            return None
        buffers = _buffers.get()
        if buffers is None:
            return None
        shape = (x.numel() // x.shape[-1], self.up.out_features)
        key = (shape, x.dtype, x.device)
        if key not in buffers:
            buffers.clear()  # one buffer at a time
            buffers[key] = x.new_empty(shape)
        return buffers[key]
