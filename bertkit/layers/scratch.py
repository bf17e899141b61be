"""Scratch memory reused across the layers of one inference forward.

Some tensors live only inside one sublayer call: the feed-forward's (tokens, I) intermediate and
the attention scores (B * N, T, T). Without autograd recording, nothing holds them afterwards, so
every layer can write its own into the same buffer instead of fresh memory. On CPU that is the
point: a fresh tensor that large is page-faulted in on first touch, which measured costlier than
the arithmetic done on it (softmax on fresh (192, 256, 256) fp32 scores: 28 ms; in place: 8 ms).

The encoder opens a `scope` around its stack of blocks; `scratch` hands out a buffer per name
within it, and nothing outside a scope (or while autograd records, or torch.compile traces).
"""

from __future__ import annotations

import contextlib
import contextvars
import math

import torch

# Per thread (and per asyncio task): the flat buffers of the forward running there.
_buffers: contextvars.ContextVar[dict | None] = contextvars.ContextVar("scratch_buffers", default=None)
# Whether the block running there is watched by hooks, which may keep the tensors they see.
_watched: contextvars.ContextVar[bool] = contextvars.ContextVar("scratch_watched", default=False)


@contextlib.contextmanager
def scope():
    """Within it, `scratch` reuses buffers; they are dropped on exit. Nothing while torch.compile
    traces (no buffers are handed out then, and dynamo cannot follow a ContextVar)."""
    if torch.compiler.is_compiling():
        yield
        return
    token = _buffers.set({})
    try:
        yield
    finally:
        _buffers.reset(token)


@contextlib.contextmanager
def watched():
    """Within it, nothing a hook may have seen is written over: `scratch` hands out no buffer and
    `may_overwrite` says no (a hook that keeps a sublayer's output, or the feed-forward's
    intermediate, would find another layer's values in it, or the residual sum)."""
    token = _watched.set(True)
    try:
        yield
    finally:
        _watched.reset(token)


def may_overwrite(t: torch.Tensor) -> bool:
    """Whether a sublayer's fresh output `t` may be written in place (an activation, a residual
    sum): nothing records it for a backward pass, no hook may hold it (`watched`), and no graph is
    being recorded (torch.compile plans the memory itself)."""
    return not t.requires_grad and not torch.compiler.is_compiling() and not _watched.get()


def plain_eager(x: torch.Tensor) -> bool:
    """Whether hand-written kernels (out= matmuls, hand-differentiated ones) may stand in for
    modules on `x`: no autocast (an out= or hand-differentiated matmul would not be cast), not
    while torch.compile traces (it fuses and plans the memory itself), not while torch.jit traces
    (torch.onnx.export's graphs have no out= forms of addmm and mm) and not under a torch.func
    transform (`func_transforming`); not on the meta device (shapes only: autocast has no such device)."""
    return (not x.is_meta and not torch.is_autocast_enabled(x.device.type) and not torch.compiler.is_compiling()
            and not torch.jit.is_tracing() and not func_transforming())


def func_transforming() -> bool:
    """Whether a torch.func transform (grad, vmap, jacrev, ...) is running: it needs autograd
    Functions written for it (setup_context, vmap rules) and tensors without out= writes, so
    the hand-written kernels step aside for torch's own ops."""
    return _functorch_active()


_functorch_active = getattr(torch._C, "_are_functorch_transforms_active", lambda: False)


def scratch(name: str, shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor | None:
    """A contiguous tensor of `shape` (dtype and device of `like`) whose memory every call with
    the same `name` in this scope shares, contents undefined; None where reuse is not safe or
    not wanted: outside a scope, while autograd records, under autocast or torch.compile. The
    caller must be done with it before the next call with that name."""
    if torch.is_grad_enabled() or not plain_eager(like) or _watched.get():  # first: compile cannot trace a ContextVar
        return None
    buffers = _buffers.get()
    if buffers is None:
        return None
    key = (name, like.dtype, like.device)
    numel = math.prod(shape)
    if key not in buffers or buffers[key].numel() < numel:
        buffers[key] = like.new_empty(numel)  # grows to the largest asked for (the old one freed)
    return buffers[key][:numel].view(shape)
