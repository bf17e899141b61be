"""Multi-head self-attention (Vaswani et al., 2017, sec. 3.2) with two paths that agree.

- fused: the fastest kernel measured for the device, dtype and length (`_fused`): torch's
  scaled_dot_product_attention (flash kernels), or on CPU two batched matmuls around a softmax
  in bf16 for short sequences and whenever attention dropout is on (torch's CPU flash kernel has
  no dropout: it falls back to unfused math with a slower random mask; dropout.py), which
  measured faster there; on CUDA, packed (unpadded) tokens go through varlen flash attention
  when this torch has it;
- explicit: the textbook softmax(Q K^T / sqrt(d) + mask) V, which can return the probabilities.

Both use the boolean mask from masks.py (True = attend). A family that changes the score (DeBERTa's
disentangled terms) overrides `score_bias`; the returned (B, heads, T, T) term is added to
Q K^T * scale on both paths. A family that encodes positions in the queries and keys themselves
(rotary embeddings, models/modern.py) overrides `rotate`; `window` limits each query to the keys
within that distance (local attention). Every path counts positions in the padded rows.

Shapes: B batch, T sequence length, H hidden size, N heads, D head size (H = N * D).
"""

from __future__ import annotations

import inspect

import torch
import torch.nn.functional as F
from torch import nn

from ..config import EncoderConfig
from .dense import bare, dense
from .dropout import Dropout, dropout
from .masks import window_mask
from .packing import Packing, slots, take
from .scratch import scratch

try:  # varlen flash attention (CUDA, fp16/bf16) arrived in torch 2.10
    from torch.nn.attention.varlen import varlen_attn
except ImportError:
    varlen_attn = None
# Whether it takes a sliding window (window_size=(left, right)).
VARLEN_WINDOWS = varlen_attn is not None and "window_size" in inspect.signature(varlen_attn).parameters

# CPU bf16 attention, measured on an AVX-512-bf16 EPYC (torch 2.13, 12 heads of 64): baddbmm +
# softmax + bmm beats the flash kernel by 1.2-2.3x up to 256 keys and loses beyond; in fp32 the
# flash kernel wins from 128 keys and the gain below is small, so fp32 always takes it.
BMM_MAX_KEYS = 256


class SelfAttention(nn.Module):
    def __init__(self, config: EncoderConfig, bias: bool = True):
        super().__init__()
        H = config.hidden_size
        self.num_heads = config.num_heads
        self.head_dim = config.head_dim
        self.scale = self.head_dim ** -0.5
        self.query = nn.Linear(H, H, bias=bias)
        self.key = nn.Linear(H, H, bias=bias)
        self.value = nn.Linear(H, H, bias=bias)
        self.out_proj = nn.Linear(H, H, bias=bias)
        # Attention dropout: kept as a module so one switch (Dropout.p) controls every dropout.
        self.dropout = Dropout(config.attention_dropout)
        # Q, K and V as one matmul over the concatenated weights (same parameters, same
        # checkpoints). None = fuse on CUDA only: on the 2-core CPU one (N, 3H) matmul measured no
        # faster than three (N, H) ones (bf16) or slower (fp32, 4096 tokens), while on a GPU one
        # launch instead of three pays off for small batches.
        self.fuse_qkv: bool | None = None
        # Local attention: a query sees only keys at most this many positions away; None = all.
        self.window: int | None = None

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        return x.view(B, T, self.num_heads, self.head_dim).transpose(1, 2)  # (B, N, T, D)

    def rotate(self, x: torch.Tensor, positions: torch.Tensor, **context) -> torch.Tensor:
        """Queries or keys x (..., H), each token turned by its position (`positions` broadcast
        to x.shape[:-1]) before they meet: rotary embeddings (RoFormer). Unchanged here.
        `context` is what the encoder's `context` hook computed."""
        return x

    @property
    def rotary(self) -> bool:
        return type(self).rotate is not SelfAttention.rotate

    def score_inputs(self, **context) -> dict:
        """Work for `score_bias` that depends on this layer but not on the tokens, done once per
        forward (not once per bucket). `context` is what the encoder's `context` hook computed."""
        return context

    def score_bias(self, q: torch.Tensor, k: torch.Tensor, **inputs) -> torch.Tensor | None:
        """Extra additive score terms, (B, N, T, T) or broadcastable; None for plain attention.
        `inputs` is what `score_inputs` returned."""
        return None

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, need_weights: bool = False,
                query: torch.Tensor | None = None, packing: Packing | None = None,
                rows: torch.Tensor | None = None, **context) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x: (B, T, H), or (total, H) real tokens only when `packing` is given; mask: (B, 1, 1, T)
        bool or None; `query`, shaped like x, when the queries come from another stream than the
        keys and values (DeBERTa's enhanced mask decoder); `rows` (K,), ascending indices into
        x's flattened tokens, when only their outputs are wanted. Returns x's shape, or (K, H)
        with rows, and, with need_weights, the attention probabilities (B, N, T, T). The textbook
        computation is `_explicit`; every other branch is a faster way to its numbers."""
        if rows is not None and packing is None and not need_weights and self.plain_scores:
            return self._at_rows(x, mask, query, rows, context), None
        q, k, v = self.project(x, query)
        if self.rotary:
            positions = packing.positions if packing is not None else self._positions(x)  # (total,) or (T,)
            q, k = self.rotate(q, positions, **context), self.rotate(k, positions, **context)
        context = self.score_inputs(**context)
        if packing is not None and not need_weights:
            return dense(take(self._unpadded(q, k, v, packing, context), rows), self.out_proj), None
        if packing is not None:  # the explicit path returns (B, N, T, T) maps: pad around it
            q, k, v = packing.pad(q), packing.pad(k), packing.pad(v)  # (B, T, H)
        q, k, v = self.split_heads(q), self.split_heads(k), self.split_heads(v)  # (B, N, T, D)
        bias, keys = self.score_bias(q, k, **context), mask
        if need_weights and self.window is not None:
            positions = self._positions(q)
            mask, stranded = window_mask(mask, positions, positions, self.window)  # (B or 1, 1, T, T or 1)
            out, probs = self._explicit(q, k, v, mask, bias, self.dropout_p)
            out, probs = out.masked_fill(stranded, 0.0), probs.masked_fill(stranded, 0.0)
        elif need_weights:
            out, probs = self._explicit(q, k, v, mask, bias, self.dropout_p)
        elif self.window is not None:
            real = None if mask is None else mask[:, 0, 0]  # (B, T)
            out, probs = self._windowed(q, k, v, self._positions(q), real, bias, self.dropout_p), None
        else:
            out, probs = self._fused(q, k, v, mask, bias, self.dropout_p), None
        if keys is not None:
            out, probs = self.padding_queries(out, probs, v, keys)
        B, N, T, D = out.shape
        out = out.transpose(1, 2).reshape(B, T, N * D)  # (B, T, H)
        if packing is not None:
            out = packing.unpad(out)  # (total, H)
        return dense(take(out, rows), self.out_proj), probs

    def padding_queries(self, out: torch.Tensor, probs: torch.Tensor | None, v: torch.Tensor,
                        keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """What the queries at the padding positions of a padded stream end up with: out and v
        (B, N, T, D), probs (B, N, T, T) or None, keys the (B, 1, 1, T) mask. No real token reads
        these rows, but a [CLS] classifier does under left padding, and attention maps show them.
        Here they attend to the real keys like every query, as in transformers; a family whose
        reference gives them something else overrides this (DeBERTa)."""
        return out, probs

    @staticmethod
    def _positions(x: torch.Tensor) -> torch.Tensor:
        """(T,) positions of a padded (B, T, H) stream."""
        return torch.arange(x.shape[-2], device=x.device)

    @torch.compiler.disable  # the per-sequence query counts are data: compiled, they would break the graph
    def _at_rows(self, x, mask, query, rows, context) -> torch.Tensor:
        """Outputs at `rows` only, (K, H), computing only their queries: each sequence's queries
        gathered into (B, M, H), M = the most any sequence has (the others repeat one of theirs,
        dropped after), attend to all of that sequence's keys and values."""
        B, T, _ = x.shape
        if rows.numel() == 0:
            return dense(take(x, rows), self.out_proj)  # (0, H), still part of the graph
        counts = torch.bincount(rows // T, minlength=B)        # (B,) queries per sequence
        M = max(int(counts.max()), 1)
        gather, real = slots(counts.cumsum(0) - counts, counts, M)  # (B, M) into the K rows
        gather = gather.clamp(0, rows.numel() - 1)             # a sequence without rows: any row
        real = real.flatten().nonzero().squeeze(1)             # (K,) slots holding a row
        q, k = dense(take(x if query is None else query, rows), self.query), dense(x, self.key)  # (K, H), (B, T, H)
        if self.rotary:
            q, k = self.rotate(q, rows % T, **context), self.rotate(k, self._positions(x), **context)
        stranded = None
        if self.window is not None:
            mask, stranded = window_mask(mask, (rows % T)[gather], self._positions(x), self.window)  # (B, 1, M, T or 1)
        q, k, v = self.split_heads(q[gather]), self.split_heads(k), self.split_heads(dense(x, self.value))
        out = self._fused(q, k, v, mask, None, self.dropout_p)  # (B, N, M, D)
        if stranded is not None:
            out = out.masked_fill(stranded, 0.0)
        return dense(out.transpose(1, 2).reshape(B * M, -1)[real], self.out_proj)  # (K, H)

    @property
    def plain_scores(self) -> bool:
        """Scores are scaled dot products only (no `score_bias` terms that need query positions)."""
        return type(self).score_bias is SelfAttention.score_bias

    def project(self, x: torch.Tensor, query: torch.Tensor | None = None):
        """Q, K, V, each shaped like x. Fused (see `fuse_qkv`) only when the queries come from x
        and all three projections have a bias (DeBERTa v1's key has none)."""
        parts = (self.query, self.key, self.value)
        fuse = x.is_cuda if self.fuse_qkv is None else self.fuse_qkv
        if fuse and query is None and all(bare(p) and p.bias is not None for p in parts):
            weight = torch.cat([p.weight for p in parts])  # (3H, H)
            bias = torch.cat([p.bias for p in parts])      # (3H,)
            return F.linear(x, weight, bias).chunk(3, dim=-1)  # 3 x (..., H) views
        return dense(x if query is None else query, self.query), dense(x, self.key), dense(x, self.value)

    @property
    def dropout_p(self) -> float:
        return self.dropout.p if self.training else 0.0

    @torch.compiler.disable  # data-dependent buckets: compiling would recompile per batch
    def _unpadded(self, q, k, v, packing, context) -> torch.Tensor:
        """Attention on packed tokens, (total, H) each: varlen flash attention where it runs
        (CUDA, half precision, no dropout, no extra score terms: DeBERTa's need the bucket
        layout), length buckets otherwise."""
        if self._varlen_runs(q, packing):
            total = q.shape[0]
            heads = (t.view(total, self.num_heads, self.head_dim) for t in (q, k, v))  # (total, N, D)
            cu, longest = packing.cumulative_lengths, packing.longest
            window = {} if self.window is None else {"window_size": (self.window, self.window)}
            out = varlen_attn(*heads, cu, cu, longest, longest, scale=self.scale, **window)  # (total, N, D)
            return out.reshape(total, -1)  # (total, H)
        return self._bucketed(q, k, v, packing, context)

    def _varlen_runs(self, q: torch.Tensor, packing: Packing) -> bool:
        """A window counts packed distances, equal to the rows' only without mask holes."""
        windowed = self.window is not None
        return (varlen_attn is not None and q.is_cuda and q.dtype in (torch.float16, torch.bfloat16)
                and self.plain_scores and self.dropout_p == 0.0
                and (not windowed or VARLEN_WINDOWS and packing.contiguous))

    def _bucketed(self, q, k, v, packing, context) -> torch.Tensor:
        """Attention on unpadded tokens, (total, H) each, bucket by bucket (packing.py): every
        sequence sees only its own keys, and little is computed for padding. Each bucket's
        inputs are one row gather and all outputs come back in one (Packing.layout), in the
        layout the kernel takes without copying: head-major (b, N, L, D) for batched matmuls,
        token-major (b, L, H) for torch's SDPA."""
        total, N = q.shape[0], self.num_heads
        heads = N if self._matmuls(q, packing.longest, self.dropout_p) else 1  # rows per token
        layout = packing.layout(heads)
        outputs = q.new_empty(packing.slots * heads, q.shape[1] // heads)  # every bucket's, end to end

        def split(t: torch.Tensor, b: int, L: int) -> torch.Tensor:  # (b * L * heads, H / heads) -> (b, N, L, D)
            return t.view(b, N, L, -1) if heads == N else self.split_heads(t.view(b, L, -1))

        rows = [t.reshape(total * heads, -1) for t in (q, k, v)]  # (total * heads, H / heads) each
        for bucket, gather in zip(packing.buckets, layout.gathers):
            b, L = bucket.rows.shape
            qb, kb, vb = (split(t.index_select(0, gather), b, L) for t in rows)
            bias = self.score_bias(qb, kb, **context)
            if self.window is None:
                ob = self._fused(qb, kb, vb, bucket.keys, bias, self.dropout_p)
            else:
                positions, real = packing.positions[bucket.rows], None  # (b, L)
                if bucket.keys is not None:  # padding slots repeat a real token: give them no position of it
                    real = bucket.keys[:, 0, 0]
                    positions = positions.masked_fill(~real, -1)
                # only padding slots can see no key here, and they are dropped: no pass to zero them
                ob = self._windowed(qb, kb, vb, positions, real, bias, self.dropout_p, zero_stranded=False)
            split(outputs[bucket.start * heads:(bucket.start + b * L) * heads], b, L).copy_(ob)
        return outputs.index_select(0, layout.inverse).view(q.shape)  # (total, H)

    def _windowed(self, q, k, v, positions, real, bias, dropout_p, zero_stranded=True):
        """Local attention, q, k, v (B, N, T, D): `positions` (T,) or (B, T), `real` (B, T) bool
        key mask or None. Past a length where most scores would be masked, in blocks, except while
        a graph is recorded (torch.export, torch.compile, torch.jit.trace): the choice would tie the
        graph to lengths on one side of it. Queries that see no key get zeros (`window_mask`),
        unless `zero_stranded` is False."""
        recording = torch.compiler.is_compiling() or torch.jit.is_tracing()
        if not recording and bias is None and self.window and q.shape[-2] > 8 * self.window:  # (window 0: alone)
            return self._blocks(q, k, v, positions, real, dropout_p, zero_stranded)
        keys = None if real is None else real[:, None, None, :]  # (B, 1, 1, T)
        allowed, stranded = window_mask(keys, positions, positions, self.window)  # (B or 1, 1, T, T or 1)
        out = self._fused(q, k, v, allowed, bias, dropout_p)  # (B, N, T, D)
        return out.masked_fill(stranded, 0.0) if zero_stranded else out

    def _blocks(self, q, k, v, positions, real, dropout_p, zero_stranded=True):
        """Sliding-window attention by blocks (Longformer's banded attention, sec. 3.1): queries
        in chunks of C = 2w, each against the C + 2w keys around it, S = 4w scores per query
        instead of T. Each block's mask is `window_mask` on its queries' and keys' positions."""
        B, N, T, D = q.shape
        w = self.window
        C, S = 2 * w, 4 * w
        n = -(-T // C)                          # chunks
        fill, around = (0, n * C - T), (w, n * C - T + w)
        far = -(2 ** 30)                        # the position of filler: near no real token
        positions = positions.expand(B, T)
        pq = F.pad(positions, fill, value=far).view(B * n, C)                  # (B * n, C)
        pk = F.pad(positions, around, value=far).unfold(1, S, C).reshape(B * n, S)  # (B * n, S)
        keys = None if real is None else F.pad(real, around, value=False).unfold(1, S, C).reshape(B * n, 1, 1, S)
        allowed, stranded = window_mask(keys, pq, pk, w)                       # (B * n, 1, C, S or 1)
        qc = F.pad(q, (0, 0, *fill)).view(B, N, n, C, D).transpose(1, 2).reshape(B * n, N, C, D)  # (B * n, N, C, D)
        kb, vb = (F.pad(t, (0, 0, *around)).unfold(2, S, C)                  # (B, N, n, D, S)
                  .permute(0, 2, 1, 4, 3).reshape(B * n, N, S, D) for t in (k, v))  # (B * n, N, S, D)
        out = self._fused(qc, kb, vb, allowed, None, dropout_p)               # (B * n, N, C, D)
        out = out.masked_fill(stranded, 0.0) if zero_stranded else out
        return out.view(B, n, N, C, D).transpose(1, 2).reshape(B, N, n * C, D)[:, :, :T]  # (B, N, T, D)

    def _fused(self, q, k, v, mask, bias, dropout_p):
        attn_mask = mask
        if bias is not None:
            # One additive mask: fold the boolean mask into the bias.
            attn_mask = bias if mask is None else bias.masked_fill(~mask, float("-inf"))
        if self._matmuls(q, k.shape[-2], dropout_p):
            return self._bmm(q, k, v, attn_mask, dropout_p)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p,
                                              scale=self.scale)  # (B, N, T, D)

    @staticmethod
    def _matmuls(q: torch.Tensor, keys: int, dropout_p: float) -> bool:
        """Whether `_fused` runs as batched matmuls (`_bmm`) rather than torch's SDPA."""
        return not q.is_cuda and (dropout_p > 0 or q.dtype == torch.bfloat16 and keys <= BMM_MAX_KEYS)

    def _bmm(self, q, k, v, attn_mask, dropout_p):
        """softmax(scale * Q K^T + mask) V as batched matmuls, the scale and the additive mask
        folded into one baddbmm; the probabilities are not kept beyond this call. In inference
        the scores go into scratch memory shared by every layer and the softmax runs in place on
        them (fresh (B * N, T, S) tensors are page-faulted in on CPU: scratch.py)."""
        B, N, T, D = q.shape
        S = k.shape[-2]
        if attn_mask is None:
            add = q.new_zeros(1, 1, 1)
        elif attn_mask.dtype == torch.bool:
            add = q.new_zeros(attn_mask.shape).masked_fill_(~attn_mask, float("-inf"))
        else:
            add = attn_mask.to(q.dtype)
        if add.dim() == 4:
            add = add.expand(B, N, -1, -1).reshape(B * N, add.shape[-2], S)  # (B * N, T or 1, S)
        buffer = scratch("attention scores", (B * N, T, S), q)
        scores = torch.baddbmm(add, q.reshape(B * N, T, D), k.reshape(B * N, S, D).transpose(1, 2),
                               beta=0 if attn_mask is None else 1,  # beta=0: no pass to copy zeros in
                               alpha=self.scale, out=buffer)  # (B * N, T, S)
        if buffer is None:
            probs = scores.softmax(dim=-1)
        else:  # each row is read before it is written: safe in place
            probs = torch.ops.aten._softmax.out(scores, -1, False, out=scores)
        probs = dropout(probs, dropout_p)
        return torch.bmm(probs, v.reshape(B * N, S, D)).view(B, N, T, D)  # (B, N, T, D)

    def _explicit(self, q, k, v, mask, bias, dropout_p):
        scores = torch.matmul(q, k.transpose(-1, -2)) * self.scale  # (B, N, T, T)
        if bias is not None:
            scores = scores + bias
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        probs = scores.softmax(dim=-1)  # (B, N, T, T)
        out = torch.matmul(dropout(probs, dropout_p), v)  # (B, N, T, D)
        return out, probs
