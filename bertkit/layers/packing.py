"""Padding removed once, at the embeddings (ModernBERT's unpadding).

Everything in a block except attention works token by token, so a padded batch (B, T, H) can
run as its real tokens only, (total, H): the projections and feed-forward layers, most of the
work, no longer compute on padding. Attention needs each sequence apart. Sequences of similar
length are grouped into buckets, each padded only to its own longest member, so attention
wastes little on padding (at most ~25% of a bucket's exact score count) in a few calls instead
of one call per sequence.

Shapes: B batch, T padded length, total = number of real tokens, b sequences in a bucket of
length L.
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass, field

import torch

# A bucket accepts one more (shorter) sequence while its padded score count stays within this
# factor of the exact one; the small allowance keeps short sequences from making one call each.
BUCKET_SLACK = 1.25
BUCKET_ALLOWANCE = 64 * 64
# On a GPU a bucket costs its gathers and kernel launches in every layer, which outweigh far more
# padded scores than on a CPU. Measured on an H100 (fp32, 16 to 32 sequences of mixed length,
# bench.inference): plain attention ran fastest with 256 * 256 of the allowances tried (64^2,
# 128^2, 256^2, one bucket); attention that does work of its own per bucket (DeBERTa's relative
# terms, ModernBERT's windows: Encoder.bucket_work) ran fastest as one bucket. Half precision's
# plain attention builds no buckets there (varlen attention).
CUDA_BUCKET_ALLOWANCE = 256 * 256


@dataclass(frozen=True)
class Bucket:
    rows: torch.Tensor   # (b, L) packed-token index per slot (padding slots repeat a real token)
    keys: torch.Tensor | None  # (b, 1, 1, L) bool attention mask; None when all lengths are equal
    real: torch.Tensor   # (n,) flat slots (in b * L) holding real tokens
    tokens: torch.Tensor  # (n,) their packed-token index
    start: int           # its first slot among every bucket's slots laid end to end


@dataclass(frozen=True)
class Layout:
    """Index maps for attention on the packed tokens viewed as (total * n, H / n): one row per
    token (n = 1) or per token and head (n = N heads). A bucket's inputs, (b, L, H) or head-major
    (b, N, L, D), are one row gather; all outputs, each bucket's laid out the same way after the
    previous one's, come back to the tokens in one gather."""
    gathers: tuple[torch.Tensor, ...]  # per bucket (b * n * L,): rows of (total * n, H / n)
    inverse: torch.Tensor  # (total * n,): each row's place among the buckets' outputs


def slots(starts: torch.Tensor, lengths: torch.Tensor, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Runs of a flat stream, (b,) starts and lengths, laid out in rows of `width` slots: the
    (b, width) stream index per slot (slots past a run's end repeat its last element) and the
    (b, width) bool mask of slots inside their run."""
    slot = torch.arange(width, device=lengths.device)
    real = slot < lengths[:, None]
    return starts[:, None] + torch.minimum(slot, lengths[:, None] - 1), real


def _buckets(lengths: list[int], starts: list[int], device, allowance: float) -> tuple[Bucket, ...]:
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    groups, current, exact = [], [], 0
    for i in order:
        L = lengths[i]
        padded = lengths[current[0]] ** 2 * (len(current) + 1) if current else 0
        if padded > BUCKET_SLACK * (exact + L * L) + allowance:
            groups.append(current)
            current, exact = [], 0
        current.append(i)
        exact += L * L
    groups.append(current)
    buckets, start = [], 0
    for group in groups:
        L = lengths[group[0]]
        rows, real = slots(torch.tensor([starts[i] for i in group]),
                           torch.tensor([lengths[i] for i in group]), L)  # (b, L) each
        keys = None if bool(real.all()) else real[:, None, None, :].to(device)
        flat = real.reshape(-1).nonzero().squeeze(1)
        buckets.append(Bucket(rows.to(device), keys, flat.to(device), rows.reshape(-1)[flat].to(device), start))
        start += rows.numel()
    return tuple(buckets)


@dataclass(frozen=True)
class Packing:
    index: torch.Tensor  # (total,) positions of the real tokens in the flattened (B * T) batch
    batch: int
    length: int
    lengths: tuple[int, ...]  # (B,) real tokens per sequence
    # (total,) each real token's position in its padded row, what rotary embeddings and sliding
    # windows count with (left padding shifts them, as in transformers). A field, not a cached
    # property: compiled blocks read it, and torch.compile cannot enter cached_property's lock.
    positions: torch.Tensor
    # Padded scores a bucket may add on top of BUCKET_SLACK before the next sequence starts a new
    # one (math.inf: one bucket, every sequence padded to the longest).
    allowance: float
    _layouts: dict = field(default_factory=dict, compare=False, repr=False)  # n -> Layout

    @classmethod
    def from_mask(cls, keys: torch.Tensor, bucket_work: bool = False) -> "Packing":
        """keys: (B, T) bool, True = real token (anywhere: left or right padding both work);
        every row holds at least one (masks.key_padding_mask makes an all-padding row all real).
        Buckets follow the device: BUCKET_ALLOWANCE on a CPU; elsewhere CUDA_BUCKET_ALLOWANCE, or
        one bucket where attention does work of its own per bucket (`bucket_work`, from
        Encoder.bucket_work)."""
        B, T = keys.shape
        index = keys.reshape(-1).nonzero().squeeze(1)  # (total,) into the flattened (B * T)
        if keys.device.type == "cpu":
            allowance = BUCKET_ALLOWANCE
        else:
            allowance = math.inf if bucket_work else CUDA_BUCKET_ALLOWANCE
        return cls(index, B, T, tuple(keys.sum(1).tolist()), index % T, allowance)  # positions: (total,)

    @functools.cached_property
    def buckets(self) -> tuple[Bucket, ...]:
        """Built on first use, once per forward (every layer shares them); never when varlen
        attention runs every layer (CUDA), which needs only the cumulative lengths."""
        return _buckets(list(self.lengths), self._offsets()[:-1], self.index.device, self.allowance)

    def layout(self, n: int) -> Layout:
        """With n rows per token (1, or the heads): built on first use, shared by every layer."""
        layout = self._layouts.get(n)
        if layout is None:
            part = torch.arange(n, device=self.index.device)
            gathers = tuple((b.rows[:, None, :] * n + part[None, :, None]).reshape(-1)
                            for b in self.buckets)  # (b, n, L) flattened
            inverse = torch.empty(len(self.index), n, dtype=torch.long, device=self.index.device)
            for b in self.buckets:  # slot i * L + l of a bucket: its part p at row i * n * L + p * L + l
                L = b.rows.shape[1]
                first = n * (b.start + b.real - b.real % L) + b.real % L  # part 0, (real slots,)
                inverse[b.tokens] = first[:, None] + part[None, :] * L
            layout = self._layouts[n] = Layout(gathers, inverse.reshape(-1))
        return layout

    @property
    def slots(self) -> int:
        """Slots in all buckets, real and padding."""
        last = self.buckets[-1]
        return last.start + last.rows.numel()

    @property
    def longest(self) -> int:
        return max(self.lengths)

    @functools.cached_property
    def cumulative_lengths(self) -> torch.Tensor:
        """(B + 1,) int32 offsets of each sequence in the packed tokens (varlen attention's
        cu_seqlens), on the tokens' device; sequences lie in batch order, each contiguous."""
        return torch.tensor(self._offsets(), dtype=torch.int32).to(self.index.device)

    @functools.cached_property
    def contiguous(self) -> bool:
        """Whether each sequence's real tokens are adjacent (no mask holes between them), so
        that distances in the packed stream are distances in the rows."""
        offsets = self._offsets()
        first, last = self.positions[offsets[:-1]], self.positions[[o - 1 for o in offsets[1:]]]
        return bool((last - first + 1 == torch.tensor(self.lengths, device=first.device)).all())

    def _offsets(self) -> list[int]:
        return [0, *itertools.accumulate(self.lengths)]  # (B + 1,)

    def unpad(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, ...) -> (total, ...)"""
        return x.reshape(self.batch * self.length, *x.shape[2:]).index_select(0, self.index)

    def pad(self, x: torch.Tensor) -> torch.Tensor:
        """(total, ...) -> (B, T, ...), zeros at the padding."""
        out = x.new_zeros(self.batch * self.length, *x.shape[1:])
        out.index_copy_(0, self.index, x)
        return out.view(self.batch, self.length, *x.shape[1:])


def take(x: torch.Tensor, rows: torch.Tensor | None) -> torch.Tensor:
    """x (..., H) -> (K, H), the flattened tokens at `rows`; x itself when rows is None."""
    return x if rows is None else x.reshape(-1, x.shape[-1]).index_select(0, rows)
