"""One transformer block and the encoder stack.

Post-LN (BERT): x = LN(x + Drop(Attn(x))); x = LN(x + Drop(FFN(x))).
Pre-LN (Xiong et al., 2020): x = x + Drop(Attn(LN(x))); x = x + Drop(FFN(LN(x))), and the stack
ends with one more LayerNorm.

Shapes: B batch, T sequence length, H hidden size.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from ..config import EncoderConfig
from .attention import SelfAttention
from .dropout import Dropout
from . import scratch
from .dense import hooked
from .feedforward import FeedForward
from .packing import Packing, take


class TransformerBlock(nn.Module):
    """Attention, feed-forward and the normalization (a function making one: LayerNorm by
    default) are passed in, so a family swaps any of them without a new block."""

    def __init__(self, config: EncoderConfig, attn: nn.Module | None = None, ffn: nn.Module | None = None,
                 norm: Callable[[], nn.Module] | None = None):
        super().__init__()
        norm = norm or (lambda: nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps))
        self.norm_first = config.norm_first
        self.attn = attn if attn is not None else SelfAttention(config)
        self.attn_norm = norm()
        self.ffn = ffn if ffn is not None else FeedForward(config)
        self.ffn_norm = norm()
        self.dropout = Dropout(config.hidden_dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, need_weights: bool = False,
                query: torch.Tensor | None = None, rows: torch.Tensor | None = None,
                **context) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x: (B, T, H); mask: (B, 1, 1, T) bool; `context` goes to the attention's score hook.
        With `query` (B, T, H), queries and the residual stream come from it while keys and
        values come from x. With `rows` (K,), ascending indices into the flattened tokens,
        attention still reads every token as a key but the block computes only those K rows
        (see Encoder.forward). Returns (B, T, H), or (K, H) with rows, and optional (B, N, T, T).
        Where a hook watches a module of the block, nothing is written over in place (`watched`)."""
        if not torch.compiler.is_compiling() and any(hooked(m) for m in self.modules()):
            with scratch.watched():
                return self._run(x, mask, need_weights, query, rows, **context)
        return self._run(x, mask, need_weights, query, rows, **context)

    def _run(self, x, mask, need_weights, query, rows, **context):
        stream = x if query is None else query
        if self.norm_first:
            q = None if query is None else self.attn_norm(query)
            a, probs = self.attn(self.attn_norm(x), mask, need_weights, query=q, rows=rows, **context)
            y = residual(take(stream, rows), self.dropout(a))
            y = residual(y, self.dropout(self.ffn(self.ffn_norm(y))))
        else:
            a, probs = self.attn(x, mask, need_weights, query=query, rows=rows, **context)
            y = self.attn_norm(residual(take(stream, rows), self.dropout(a)))
            y = self.ffn_norm(residual(y, self.dropout(self.ffn(y))))
        return y, probs


def residual(stream: torch.Tensor, update: torch.Tensor) -> torch.Tensor:
    """stream + update. When autograd records neither (inference), the sum is written into
    `update`, the fresh output of a sublayer that nothing else holds, instead of new memory;
    not when the sum needs another shape or dtype (under autocast, a bf16 projection's output
    added to an fp32 stream stays fp32)."""
    if (stream.requires_grad or not scratch.may_overwrite(update) or update.shape != stream.shape
            or update.dtype != stream.dtype):
        return stream + update
    return update.add_(stream)


class Encoder(nn.Module):
    """A stack of blocks, with three hooks for families:
    `layer_for(i)`: which block runs at depth i (ALBERT reuses shared blocks);
    `context(length, device)`: extra inputs computed once per forward for every attention layer
    (DeBERTa's relative positions and their embeddings);
    `after_layer(i, x, inputs, mask, packing)`: a change to the stream after block i (DeBERTa's
    convolution); after the last block under `rows` (see forward), x holds only those rows.
    With a `packing`, the stream holds only the real tokens, (total, H); see packing.py.
    `slot_distances`: whether attention reads how far apart two tokens are from their slots in
    the stream (DeBERTa's relative positions), true only while no mask hole separates them.
    `bucket_work`: whether attention on packed tokens does work of its own per length bucket
    (DeBERTa's relative terms, sliding windows), so that off a CPU one bucket is fastest (Packing.from_mask)."""

    slot_distances = False
    bucket_work = False

    def __init__(self, blocks: list[nn.Module], num_layers: int | None = None,
                 final_norm: nn.Module | None = None):
        super().__init__()
        self.layers = nn.ModuleList(blocks)
        self.num_layers = num_layers if num_layers is not None else len(blocks)
        self.final_norm = final_norm
        # Activation checkpointing (Chen et al., 2016): in training, keep only each block's input
        # and recompute its insides during backward; memory for time.
        self.checkpointing = False

    def layer_for(self, i: int) -> nn.Module:
        return self.layers[i]

    def context(self, length: int, device: torch.device) -> dict:
        return {}

    def after_layer(self, i: int, x: torch.Tensor, inputs: torch.Tensor, mask: torch.Tensor | None,
                    packing: Packing | None) -> torch.Tensor:
        return x

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, output_attentions: bool = False,
                packing: Packing | None = None, output_hidden_states: bool = False,
                rows: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]:
        """x: (B, T, H) or, with `packing`, (total, H); mask: (B, 1, 1, T) bool or None. Returns
        the output (x's shape), the attention probabilities per layer and the stream before each
        layer and at the end (embeddings first, num_layers + 1 tensors), each empty unless asked:
        keeping every layer's output alive costs memory in inference.
        `rows` (K,): indices into x's flattened tokens whose output is all the caller needs (an
        MLM loss reads only the masked ones), in ascending order. The output is then (K, H), and
        the last block computes only those rows, keys and values excepted (MosaicBERT): in
        BERT-base MLM training, ~6% of the encoder's matmul work never happens. Not when every
        layer's states are asked for, nor when a one-layer stack has an `after_layer` change,
        which needs every token."""
        attentions, states = [], [x] if output_hidden_states else []
        length = x.shape[1] if packing is None else packing.length
        inputs, context = x, self.context(length, x.device)
        if packing is not None:
            context["packing"] = packing
        last = self.num_layers - 1
        rows_in_block = rows is not None and not output_hidden_states and (
            last > 0 or type(self).after_layer is Encoder.after_layer)
        with scratch.scope():
            for i in range(self.num_layers):
                block = self.layer_for(i)
                kwargs = {**context, "rows": rows} if rows_in_block and i == last else context
                if self.checkpointing and self.training and torch.is_grad_enabled():
                    x, probs = checkpoint(block, x, mask, output_attentions, use_reentrant=False, **kwargs)
                else:
                    x, probs = block(x, mask, output_attentions, **kwargs)
                x = self.after_layer(i, x, inputs, mask, packing)
                if output_hidden_states:
                    states.append(x)
                if output_attentions:
                    attentions.append(probs)
        if self.final_norm is not None and output_hidden_states:  # rows_in_block is off then
            states[-1] = self.final_norm(x)  # the last state after the final norm, as transformers 5 reports it
            return (states[-1] if rows is None else take(states[-1], rows)), tuple(attentions), tuple(states)
        if rows is not None and not rows_in_block:
            x = take(x, rows)
        if self.final_norm is not None:
            x = self.final_norm(x)
        return x, tuple(attentions), tuple(states)


def build_encoder(config: EncoderConfig) -> Encoder:
    """The standard stack: num_layers independent blocks (plus a final LN for pre-LN)."""
    final_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps) if config.norm_first else None
    return Encoder([TransformerBlock(config) for _ in range(config.num_layers)], final_norm=final_norm)
