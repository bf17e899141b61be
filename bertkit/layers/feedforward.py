"""Position-wise feed-forward network: up-projection, activation, down-projection
(Vaswani et al., 2017, sec. 3.3). Shapes: (B, T, H) -> (B, T, I) -> (B, T, H).

In inference (no autograd recording), the (tokens, I) intermediate, the widest tensor of a
block, is written into scratch memory that every layer of a forward reuses (scratch.py), and the
activation runs in place on it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..config import EncoderConfig
from .activations import activation, activation_backward_into, activation_in_place
from .dense import autocast_packed, bare, dense, dense_act, fuses, linear
from .scratch import may_overwrite, plain_eager, scratch


class FeedForward(nn.Module):
    """`up_width`: the up-projection's output width when it is not I (a gated variant makes two
    halves: models/modern.py); `bias`: whether both projections have one."""

    def __init__(self, config: EncoderConfig, up_width: int | None = None, bias: bool = True):
        super().__init__()
        self.up = nn.Linear(config.hidden_size, up_width or config.intermediate_size, bias=bias)
        self.act_name = config.hidden_act
        self.act = activation(config.hidden_act)
        self.act_in_place = activation_in_place(config.hidden_act)
        self.act_backward_into = activation_backward_into(config.hidden_act)
        self.down = nn.Linear(config.intermediate_size, config.hidden_size, bias=bias)
        # Training through _Recycling (see there); False = plain autograd, for comparison.
        self.recycle = True

    # The activation applies to the whole up-projection, so oneDNN may fuse it into the matmul
    # (a gated variant's does not: False there).
    fusable = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """down(activate(up(x))); the branches below are faster ways to the same numbers."""
        if self._recycles(x):
            return _Recycling.apply(x, self.up.weight, self.up.bias, self.down.weight, self.down.bias,
                                    self.act, self.act_backward_into)
        if self.fusable and ((fuses(x, self.up) and fuses(x, self.down)) or autocast_packed(x, self.up)):
            h = dense_act(x, self.up, self.act_name)
            if h is not None:
                return dense(h, self.down)
        reuse = self.reuses_memory()
        buffer = self._buffer(x) if reuse else None
        if buffer is not None:
            h = self._up_into(x, buffer)  # (tokens, up width)
        else:
            h = dense(x, self.up) if autocast_packed(x, self.up) else self.up(x)  # (B, T, up width)
        # in place where nothing records h for a backward pass: its memory is reused
        in_place = buffer is not None or (reuse and self.act_in_place is not None and may_overwrite(h))
        h = self.activate(h, in_place)  # (..., I)
        return dense(h.view(*x.shape[:-1], h.shape[-1]), self.down)  # (B, T, H)

    def activate(self, h: torch.Tensor, in_place: bool) -> torch.Tensor:
        """The activation of the up-projection h (..., I), overwriting h if `in_place`: the hook a
        gated variant overrides."""
        return self.act_in_place(h) if in_place else self.act(h)

    def reuses_memory(self) -> bool:
        """Whether this call may write the up-projection into scratch memory and activate it in
        place (a variant that drops activations in training may not)."""
        return True

    def _up_into(self, x: torch.Tensor, buffer: torch.Tensor) -> torch.Tensor:
        """The up-projection of x (..., H), written into `buffer` (tokens, up.out_features)."""
        x2d = x.reshape(-1, x.shape[-1])  # (tokens, H)
        if self.up.bias is None:
            return torch.mm(x2d, self.up.weight.t(), out=buffer)
        return torch.addmm(self.up.bias, x2d, self.up.weight.t(), out=buffer)

    def _hand_written(self, x: torch.Tensor, *linears: nn.Linear) -> bool:
        """Whether this call may run its own matmuls instead of the modules': plain `linears`
        with biases, and `plain_eager`."""
        return all(bare(m) and m.bias is not None for m in linears) and plain_eager(x)

    def _recycles(self, x: torch.Tensor) -> bool:
        """Whether a recorded forward goes through _Recycling: an activation with a known
        backward and both projections hand-written."""
        return (self.recycle and torch.is_grad_enabled() and self.act_backward_into is not None
                and self._hand_written(x, self.up, self.down))

    def _buffer(self, x: torch.Tensor) -> torch.Tensor | None:
        """The shared (tokens, up.out_features) scratch buffer, when this call may write into it:
        an in-place activation, a plain up-projection (with or without bias), and what `scratch`
        asks (no autograd, eager, ...)."""
        if self.act_in_place is None or not bare(self.up):
            return None
        return scratch("feed-forward intermediate", (x.numel() // x.shape[-1], self.up.out_features), x)


class _Recycling(torch.autograd.Function):
    """up -> activation -> down for training, with a hand-written backward that spends less
    memory than autograd's: only the activation's input is kept (its output, as large, is
    recomputed in backward: one activation per layer), and both (tokens, I) gradients are
    written into that recomputed tensor instead of fresh ones. On CPU fresh tensors are
    page-faulted in every step, which made the down-projection's input gradient run at 2/3 of
    the matmul's speed. Same kernels as autograd; nothing saved is overwritten, so
    retain_graph=True works. Under create_graph=True the backward computes the same gradients
    with autograd's own ops (`differentiable_grads`), so they can be differentiated again."""

    @staticmethod
    def forward(ctx, x, w_up, b_up, w_down, b_down, act, act_backward_into):
        x2d = x.reshape(-1, x.shape[-1])                       # (N, H)
        pre = linear(x2d, w_up, b_up)                          # (N, I)
        y = linear(act(pre), w_down, b_down)                   # (N, H)
        ctx.save_for_backward(x, w_up, b_up, w_down, b_down, pre)
        ctx.act, ctx.act_backward_into = act, act_backward_into
        return y.view(*x.shape[:-1], y.shape[-1])

    @staticmethod
    def backward(ctx, grad):
        x, w_up, b_up, w_down, b_down, pre = ctx.saved_tensors
        need = ctx.needs_input_grad
        g = grad.reshape(-1, grad.shape[-1])                   # (N, H)
        if torch.is_grad_enabled():  # create_graph=True
            return (*_Recycling.differentiable_grads(ctx, x, w_up, b_up, w_down, g), None, None)
        x2d = x.reshape(-1, x.shape[-1])                       # (N, H)
        post = ctx.act(pre)                                    # (N, I), recomputed
        g_w_down = g.t().mm(post) if need[3] else None         # (H, I)
        g_b_down = g.sum(0) if need[4] else None
        g_post = torch.mm(g, w_down, out=post)                 # (N, I): post is spent
        g_pre = ctx.act_backward_into(g_post, pre, g_post)     # (N, I), in place
        g_w_up = g_pre.t().mm(x2d) if need[1] else None        # (I, H)
        g_b_up = g_pre.sum(0) if need[2] else None
        g_x = linear(g_pre, w_up.t()).view(x.shape) if need[0] else None
        return g_x, g_w_up, g_b_up, g_w_down, g_b_down, None, None

    @staticmethod
    def differentiable_grads(ctx, x, w_up, b_up, w_down, g):
        """The same five gradients from autograd's own ops on the recomputed sublayer, so that
        they can be differentiated again. Each is this sublayer's own: the activation's
        derivative is taken back to its input only, never through x's history."""
        need = ctx.needs_input_grad
        x2d = x.reshape(-1, x.shape[-1])                       # (N, H)
        pre = F.linear(x2d, w_up, b_up)                        # (N, I)
        post = ctx.act(pre)
        g_pre = torch.autograd.grad(post, pre, g @ w_down, create_graph=True)[0]  # (N, I)
        return (g_pre.mm(w_up).view(x.shape) if need[0] else None,
                g_pre.t().mm(x2d) if need[1] else None,
                g_pre.sum(0) if need[2] else None,
                g.t().mm(post) if need[3] else None,
                g.sum(0) if need[4] else None)
