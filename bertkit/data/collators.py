"""Masking collators: framed examples -> the tensors an objective reads.

Masked LM (Devlin et al., 2019, sec. 3.1 and A.1): choose `rate` (15%) of the real, non-special
tokens of each row; of those, 80% become [MASK], 10% a random token, 10% stay unchanged; labels
hold the original id at chosen positions and -100 elsewhere. Whole-word masking (BERT's 2019
release) chooses whole words: a word's tokens are chosen or left together. ELECTRA's generator
input (Clark et al., 2020) uses 85% [MASK] / 15% unchanged and also returns `masked_positions`.

The number of chosen tokens in a row is rate * candidates, rounded up or down at random with the
right odds (so the expected rate is exact even for short rows, and rows are never all-masked).

Randomness is counter-based: every random number is SplitMix64 at (row key, position, stream),
where a row key mixes the seed, the example index and a "mask version". So a row's mask is a
pure function of those three numbers, whatever batch it lands in, and needs no generator state:
- dynamic masking (RoBERTa, Liu et al., 2019, sec. 4.1): version = epoch, a new mask every pass;
- static masking (original BERT, duplicated K times): version = epoch % K, K fixed masks.
No global RNG (torch's or NumPy's) is touched.

Shapes: B batch, T length.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..errors import BertkitError
from .builders import Batch

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def mix(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finalizer (Steele et al., 2014): a bijection of uint64 whose outputs pass
    BigCrush for consecutive inputs; wraps modulo 2**64 by design."""
    with np.errstate(over="ignore"):
        z = (np.asarray(x, dtype=np.uint64) + _GOLDEN).astype(np.uint64)
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
        return z ^ (z >> np.uint64(31))


def row_keys(seed: int, examples: np.ndarray, version: np.ndarray | int) -> np.ndarray:
    """(B,) uint64 keys from the seed, each row's example index and its mask version."""
    with np.errstate(over="ignore"):
        k = mix(np.full(len(examples), seed, dtype=np.uint64))
        k = mix(k ^ np.asarray(examples, dtype=np.uint64))
        return mix(k ^ np.asarray(version, dtype=np.uint64))


def random_bits(keys: np.ndarray, T: int, stream: int) -> np.ndarray:
    """(B, T) uint64 random words: SplitMix64's sequence with each row key as its state, at
    counters stream * 2**32 + t (one multiply-add and one finalizer per number)."""
    with np.errstate(over="ignore"):
        counter = np.arange(1, T + 1, dtype=np.uint64) + np.uint64(stream) * np.uint64(1 << 32)
        return mix(keys[:, None] + counter[None, :] * _GOLDEN)


def uniform(keys: np.ndarray, T: int, stream: int) -> np.ndarray:
    """(B, T) float64 uniforms in [0, 1) from row keys (B,) for random-number stream `stream`."""
    return (random_bits(keys, T, stream) >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


@dataclass(frozen=True)
class MaskingSettings:
    rate: float = 0.15
    mask_fraction: float = 0.8      # of chosen tokens: -> [MASK]
    random_fraction: float = 0.1    # -> a random non-special token; the rest stay unchanged
    whole_word: bool = False

    def __post_init__(self) -> None:
        if not 0 < self.rate < 1:
            raise BertkitError(f"masking rate must be in (0, 1), got {self.rate}")
        if self.mask_fraction < 0 or self.random_fraction < 0 or self.mask_fraction + self.random_fraction > 1:
            raise BertkitError(f"mask and random fractions must be >= 0 and sum to at most 1, got "
                               f"{self.mask_fraction} and {self.random_fraction}")


ELECTRA_MASKING = MaskingSettings(rate=0.15, mask_fraction=0.85, random_fraction=0.0)


class MaskingCollator:
    """Masks framed batches for one tokenizer. `special_ids` are never chosen nor drawn as random
    replacements; `continues_word` (V,) marks tokens that continue a word, for whole-word masking."""

    def __init__(self, mask_id: int, vocab_size: int, special_ids: list[int], settings: MaskingSettings = MaskingSettings(),
                 continues_word: np.ndarray | None = None, seed: int = 0, generator_outputs: bool = False):
        if mask_id is None:
            raise BertkitError("this tokenizer has no mask token, so it cannot be used for masked-LM training")
        if settings.whole_word and continues_word is None:
            raise BertkitError("whole-word masking needs the tokenizer's word-continuation table")
        self.mask_id, self.settings, self.seed = mask_id, settings, seed
        self.generator_outputs = generator_outputs
        self.is_special = np.zeros(vocab_size, dtype=bool)
        self.is_special[[i for i in special_ids if i < vocab_size]] = True
        self.normal_ids = np.flatnonzero(~self.is_special)
        self.continues = None
        if continues_word is not None:
            self.continues = np.zeros(vocab_size, dtype=bool)
            n = min(vocab_size, len(continues_word))
            self.continues[:n] = continues_word[:n]

    @classmethod
    def for_tokenizer(cls, tokenizer, settings: MaskingSettings = MaskingSettings(), seed: int = 0,
                      generator_outputs: bool = False) -> "MaskingCollator":
        return cls(tokenizer.mask_token_id, tokenizer.vocab_size, tokenizer.special_ids, settings,
                   tokenizer.continues_word(), seed, generator_outputs)

    def choose(self, ids: np.ndarray, lengths: np.ndarray, keys: np.ndarray) -> np.ndarray:
        """(B, T) bool: the positions to predict."""
        B, T = ids.shape
        real = np.arange(T) < lengths[:, None]
        candidate = real & ~self.is_special[ids]  # (B, T)
        n = candidate.sum(1)
        k = np.floor(self.settings.rate * n + uniform(keys, 1, 0)[:, 0]).astype(np.int64)  # (B,)
        # integer scores: 44 random bits, then the position in the low bits, so every score in a
        # row is distinct and a plain (unstable, faster) sort ranks them reproducibly
        shift = max(1, int(T).bit_length())
        score = (random_bits(keys, T, 1) >> np.uint64(20)).astype(np.int64)  # (B, T)
        if self.settings.whole_word:
            previous = np.concatenate([np.zeros((B, 1), bool), candidate[:, :-1]], axis=1)
            starts = candidate & ~(self.continues[ids] & previous)  # (B, T) first token of a word
            start_pos = np.maximum.accumulate(np.where(starts, np.arange(T), 0), axis=1)  # (B, T)
            score = np.take_along_axis(score, start_pos, axis=1)  # every token gets its word's score
        score = np.where(candidate, (score << shift) | np.arange(T), np.iinfo(np.int64).max)
        # a word's tokens share its random bits and differ in position: adjacent in rank order,
        # its first token first
        order = np.argsort(score, axis=1)  # (B, T)
        sorted_candidate = np.take_along_axis(candidate, order, axis=1)
        before = np.cumsum(sorted_candidate, axis=1) - sorted_candidate  # chosen ahead of each
        chosen = np.zeros_like(candidate)
        np.put_along_axis(chosen, order, sorted_candidate & (before < k[:, None]), axis=1)
        if self.settings.whole_word:
            # a word is in when its first token is (its tokens follow it in rank order)
            chosen = np.take_along_axis(chosen & starts, start_pos, axis=1) & candidate
        return chosen

    def __call__(self, batch: Batch, examples: np.ndarray, version: np.ndarray | int) -> dict[str, torch.Tensor]:
        """Mask `batch`, whose rows are `examples` (indices), with mask version(s) `version`."""
        ids = batch.input_ids
        B, T = ids.shape
        keys = row_keys(self.seed, examples, version)
        chosen = self.choose(ids, batch.lengths, keys)
        # 80/10/10 on integer random words: u < f  <=>  bits < f * 2**64
        u = random_bits(keys, T, 2)
        s = self.settings
        mask_below = np.uint64(min(2**64 - 1, int(s.mask_fraction * 2**64)))
        random_below = np.uint64(min(2**64 - 1, int((s.mask_fraction + s.random_fraction) * 2**64)))
        to_mask = chosen & (u < mask_below)
        to_random = chosen & (u >= mask_below) & (u < random_below)
        with np.errstate(over="ignore"):  # high 32 bits times n, high half: an index in [0, n)
            pick = ((random_bits(keys, T, 3) >> np.uint64(32)) * np.uint64(len(self.normal_ids))) >> np.uint64(32)
        masked = np.where(to_mask, self.mask_id, np.where(to_random, self.normal_ids[pick.astype(np.int64)], ids))
        out = {
            "input_ids": torch.from_numpy(masked),
            "attention_mask": torch.from_numpy((np.arange(T) < batch.lengths[:, None]).astype(np.int64)),
            "token_type_ids": torch.from_numpy(batch.token_type_ids),
            "labels": torch.from_numpy(np.where(chosen, ids, -100)),
        }
        if batch.pair_labels is not None:
            out["pair_labels"] = torch.from_numpy(batch.pair_labels)
        if self.generator_outputs:
            out["masked_positions"] = torch.from_numpy(chosen)
        return out
