"""Masking collators: framed examples -> the tensors an objective reads.

Masked LM (Devlin et al., 2019, sec. 3.1 and A.1): choose `rate` (15%) of the real, non-special
tokens of each row; of those, 80% become [MASK], 10% a random token, 10% stay unchanged; labels
hold the original id at chosen positions and -100 elsewhere. Whole-word masking (BERT's 2019
release) chooses whole words: a word's tokens are chosen or left together. ELECTRA's generator
input (Clark et al., 2020) uses 85% [MASK] / 15% unchanged and also returns `masked_positions`.

Token masking chooses rate * candidates tokens in a row, rounded up or down at random with the
right odds, so the expected count is exactly rate * candidates even for short rows. Whole-word
masking chooses rate * (the row's words) words, rounded the same way: every token is then chosen
with probability `rate`, whatever its word's length. (A budget of tokens filled word by word
misses it: taking the word that crosses the budget overshoots, by 7 points on 32-token rows of
long words; skipping it, as Google's script and transformers' collator do, favours short words.)

N-gram masking (ALBERT, Lan et al., 2020, sec. 4.1, after SpanBERT, Joshi et al., 2019) chooses
n-grams of 1..`max_ngram` consecutive whole words, n drawn with p(n) = (1/n) / sum_k (1/k), k up to
`max_ngram` (6/11, 3/11, 2/11 for ALBERT's 3). Each run of candidate tokens between special tokens
is cut into consecutive n-grams, each drawing its n at its first word (a run's last n-gram is cut
short where the run ends), and rate * (the row's n-grams) of them are chosen, rounded at random as
above. Every candidate lies in exactly one n-gram and the chosen ones are a uniformly random subset,
so the expected masked fraction is exactly `rate` and the chosen n-grams' lengths follow p(n) but
for the cut-short ones (on IMDB rows of 128 tokens: 0.551, 0.272, 0.177); n-grams never overlap or
cross a special token. The price is a count per row that varies with the n-grams drawn (standard
deviation 2.9 tokens around 18.9 there, against 1.3 for whole words, 0.3 for tokens and 4.0 for
the per-token coin flips of Hugging Face's collator): a token budget would hold it within an
n-gram of its target but favour the n-grams that fit. google-research/albert's create_pretraining_data.py does that: it visits
start words in random order, shortens an n-gram that would pass round(rate * tokens) and skips one
that overlaps, so its n-grams lean short. There, as here, [MASK] / random / unchanged is decided per
token (`create_masked_lm_predictions` draws it inside the loop over an n-gram's tokens).

Randomness is counter-based: a row key mixes the seed, the example index and a "mask version",
and token t of the row gets SplitMix64's t-th output from that key. So a row's mask is a pure
function of those three numbers and its tokens, whatever batch it lands in and however wide the
batch is padded, and needs no generator state:
- dynamic masking (RoBERTa, Liu et al., 2019, sec. 4.1): version = epoch, a new mask every pass;
- static masking (original BERT, duplicated K times): version = epoch % K, K fixed masks.
No global RNG (torch's or NumPy's) is touched.

One 64-bit word per token carries every draw that token needs (hashing is the largest cost here,
so each word is split into fields instead of hashing once per draw): the high 32 bits rank the
token for selection, the low 32 bits decide [MASK] / random / unchanged. Only the ~1.5% of
tokens that become random tokens hash once more, for the replacement id, and with n-gram masking
each word's first token, for its n.

Shapes: B batch, T length, N chosen tokens in the batch, W words in the batch, R runs of candidate
tokens (between special tokens or padding) in the batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch

from ..config import check_field_types
from ..errors import BertkitError
from .builders import Batch

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_HIGH32 = np.uint64(0xFFFFFFFF00000000)
_LOW32 = np.uint64(0xFFFFFFFF)
_NEVER = np.uint64(2**64 - 1)  # the rank score of a non-candidate: above every candidate's
# (NumPy wraps integer *array* arithmetic modulo 2**64 silently, which the hash relies on; every
# operation below keeps at least one operand an array, so no overflow warning is raised.)


def _finalize(z: np.ndarray) -> np.ndarray:
    """SplitMix64's output function (Steele et al., 2014), in place on a uint64 array: a
    bijection whose outputs for consecutive states pass BigCrush."""
    z ^= z >> np.uint64(30)
    z *= _M1
    z ^= z >> np.uint64(27)
    z *= _M2
    z ^= z >> np.uint64(31)
    return z


def mix(x: np.ndarray) -> np.ndarray:
    """One SplitMix64 step from states x: advance by the golden gamma, then finalize (a new array)."""
    return _finalize(np.atleast_1d(np.asarray(x, dtype=np.uint64)) + _GOLDEN)


def mix_int(x: int) -> int:
    """`mix` on one Python int (equal to it, a test checks): a few NumPy calls on a 1-element
    array cost more than the whole 64-row batch's key, so scalars stay in Python."""
    z = (x + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return z ^ (z >> 31)


def row_keys(seed: int, examples: np.ndarray, version: np.ndarray | int) -> np.ndarray:
    """(B,) uint64 keys mix(mix(mix(seed) ^ version) ^ example) from the seed, each row's example
    index and its mask version (an int, or one per row)."""
    if np.ndim(version) == 0:
        k = np.uint64(mix_int(mix_int(seed) ^ int(version)))
    else:
        k = mix(np.uint64(mix_int(seed)) ^ np.asarray(version, dtype=np.uint64))  # (B,)
    return mix(k ^ np.asarray(examples, dtype=np.uint64))


@lru_cache(maxsize=16)
def _gammas(T: int) -> np.ndarray:
    """(T,) t * golden gamma for t = 1..T, read-only: SplitMix64's states are key + t * gamma."""
    steps = np.arange(1, T + 1, dtype=np.uint64) * _GOLDEN
    steps.flags.writeable = False
    return steps


def token_words(keys: np.ndarray, T: int) -> np.ndarray:
    """(B, T) uint64: SplitMix64's outputs 1..T with each row key (B,) as the initial state, so
    token t's word does not depend on T or on the other rows."""
    return _finalize(keys[:, None] + _gammas(T))  # (B, T)


def row_uniform(keys: np.ndarray) -> np.ndarray:
    """(B,) float64 uniforms in [0, 1) from the row keys' top 53 bits: a key is itself a SplitMix64
    output, and the token words hash key + t * gamma for t >= 1, never the key alone."""
    return (keys >> np.uint64(11)) * (1.0 / (1 << 53))


@dataclass(frozen=True)
class MaskingSettings:
    """Which tokens a batch predicts: `rate` of them (BERT's 15%), of which `mask_fraction` become
    the mask token, `random_fraction` a random token and the rest stay (BERT sec. 3.1: 80/10/10);
    `whole_word` masks every piece of a chosen word; `max_ngram` > 1 chooses n-grams of whole
    words with p(n) ~ 1/n (ALBERT). Every field is type-checked."""
    rate: float = 0.15
    mask_fraction: float = 0.8      # of chosen tokens: -> [MASK]
    random_fraction: float = 0.1    # -> a random non-special token; the rest stay unchanged
    whole_word: bool = False
    max_ngram: int = 1              # > 1: n-grams of 1..max_ngram whole words, p(n) ~ 1/n (ALBERT)

    def __post_init__(self) -> None:
        check_field_types(self)
        if not 0 < self.rate < 1:
            raise BertkitError(f"masking rate must be in (0, 1), got {self.rate}")
        if self.mask_fraction < 0 or self.random_fraction < 0 or self.mask_fraction + self.random_fraction > 1:
            raise BertkitError(f"mask and random fractions must be >= 0 and sum to at most 1, got "
                               f"{self.mask_fraction} and {self.random_fraction}")
        if isinstance(self.max_ngram, bool) or not isinstance(self.max_ngram, int) or self.max_ngram < 1:
            raise BertkitError(f"max_ngram must be a whole number of words, at least 1, got {self.max_ngram!r}")
        if self.max_ngram > 1 and not self.whole_word:
            raise BertkitError(f"n-gram masking (max_ngram={self.max_ngram}) masks whole words: set whole_word=True")


ELECTRA_MASKING = MaskingSettings(rate=0.15, mask_fraction=0.85, random_fraction=0.0)
ALBERT_MASKING = MaskingSettings(whole_word=True, max_ngram=3)  # 80/10/10 on n-grams of 1-3 words


def tile(runs: np.ndarray, n: np.ndarray, max_n: int) -> np.ndarray:
    """(W,) the words in the n-gram each word begins, 0 for a word inside one: every run of words
    (`runs` (W,) True at a run's first word) cut into consecutive n-grams of the n (W,) <= max_n
    their first words drew, a run's last one cut short where the run ends. The n-grams' first
    words are the orbit of each run's first word under w -> w + n[w]; pointer doubling (Wyllie,
    1979) lists all orbits in ceil(log2(longest run)) vectorized steps, not a loop over words."""
    W = len(n)
    ahead = np.append(runs, np.ones(max_n, dtype=bool))  # (W + max_n,) a run (or the end) at word w
    size = n.copy()  # (W,) the words of an n-gram begun here: n, or fewer where a run begins sooner
    for k in range(max_n - 1, 0, -1):
        size[ahead[k:k + W] & (k < size)] = k
    after = np.arange(W) + size
    after[ahead[after]] = W  # a run's last n-gram has no next one
    jump = np.append(after, W)  # (W + 1,) the next n-gram's first word; W: none
    heads = np.flatnonzero(runs)  # (R,)
    rounds = int(np.diff(heads, append=W).max(initial=1) - 1).bit_length()  # 2**rounds >= the longest run
    orbit = np.empty(len(heads) << rounds, dtype=np.intp)  # (R * 2**rounds,) [j * R + r]: run r's j-th
    orbit[:len(heads)] = heads
    m = len(heads)
    for _ in range(rounds):
        orbit[m:2 * m] = jump[orbit[:m]]  # jump leads m / R n-grams ahead: the next m / R of each run
        jump = jump[jump]
        m *= 2
    begins = np.zeros(W + 1, dtype=bool)
    begins[orbit] = True
    return size * begins[:W]


def after_candidate(candidate: np.ndarray) -> np.ndarray:
    """(B, T) bool: the token before is a candidate (in the same row)."""
    previous = np.zeros_like(candidate)
    previous[:, 1:] = candidate[:, :-1]
    return previous


def lowest(score: np.ndarray, k: np.ndarray) -> np.ndarray:
    """(B, T) bool: the k (B,) lowest of each row's distinct scores (B, T). The k lowest are those
    below the (k+1)-th lowest: one sort of the scores instead of an argsort and a scatter
    (k <= the scores below _NEVER, so k = T means every position is one)."""
    B, T = score.shape
    ranked = np.sort(score, axis=1)
    bound = ranked[np.arange(B), np.minimum(k, T - 1)]  # (B,)
    bound[k >= T] = _NEVER
    return score < bound[:, None]


def first_of(starts: np.ndarray) -> np.ndarray:
    """(B, T) flat index of the first token of each token's group, given the groups' first tokens
    (B, T) bool. Tokens before the batch's first group (number -1) get a harmless clipped index.
    (A cumulative count is about 3x faster than a running maximum of start positions.)"""
    flat = starts.reshape(-1)
    return np.flatnonzero(flat).take(np.cumsum(flat) - 1, mode="clip").reshape(starts.shape)


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
        self.is_normal = ~self.is_special
        self.normal_ids = np.flatnonzero(self.is_normal)
        self.continues = None
        if continues_word is not None:
            self.continues = np.zeros(vocab_size, dtype=bool)
            n = min(vocab_size, len(continues_word))
            self.continues[:n] = continues_word[:n]
        # 80/10/10 on a token word's low 32 bits: [MASK] below the first bound, a random token
        # below the second, unchanged above (a fraction f of 2**32 values, to 2**-32)
        self.mask_below = np.uint64(round(settings.mask_fraction * 2**32))
        self.random_below = np.uint64(round((settings.mask_fraction + settings.random_fraction) * 2**32))
        # n on a hash's low 32 bits: the cumulative p(n) ~ 1/n, n = 1..max_ngram, as bounds out of 2**32
        p = 1 / np.arange(1, settings.max_ngram + 1)
        self.ngram_below = np.round(np.cumsum(p / p.sum())[:-1] * 2**32).astype(np.uint64)  # (max_ngram - 1,)

    @classmethod
    def for_tokenizer(cls, tokenizer, settings: MaskingSettings = MaskingSettings(), seed: int = 0,
                      generator_outputs: bool = False) -> "MaskingCollator":
        return cls(tokenizer.mask_token_id, len(tokenizer), tokenizer.special_ids, settings,
                   tokenizer.continues_word(), seed, generator_outputs)

    def candidates(self, ids: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """(B, T) bool: the real, non-special tokens, the only ones that may be chosen."""
        T = ids.shape[1]
        candidate = self.is_normal[ids]  # (B, T)
        if lengths.min() < T:
            candidate &= np.arange(T, dtype=np.uint64) < lengths[:, None].astype(np.uint64)
        return candidate

    def word_starts(self, ids: np.ndarray, candidate: np.ndarray) -> np.ndarray:
        """(B, T) bool: each word's first token; a piece after a non-candidate begins a word."""
        return candidate & ~(self.continues[ids] & after_candidate(candidate))

    def choose(self, ids: np.ndarray, lengths: np.ndarray, keys: np.ndarray, words: np.ndarray) -> np.ndarray:
        """(B, T) bool: the positions to predict, from the row keys (B,) and token words (B, T)."""
        T = ids.shape[1]
        candidate = self.candidates(ids, lengths)
        n = candidate.sum(1)  # (B,)
        if not n.any():
            return candidate  # nothing to choose (and no word to rank by)
        if self.settings.whole_word:
            # the units are whole words (or n-grams of them): rate * (the row's units) of them are
            # chosen, so every token is chosen with probability `rate` whatever its word's length,
            # and a token is in when its unit's first token is picked
            starts = (self.ngram_sizes(ids, candidate, words) > 0 if self.settings.max_ngram > 1
                      else self.word_starts(ids, candidate))
            return candidate & self.pick(starts, keys, words).reshape(-1)[first_of(starts)]
        k = np.floor(self.settings.rate * n + row_uniform(keys)).astype(np.int64)  # (B,)
        # rank score: the token word's high 32 bits, then the position in the low bits, so the
        # scores in a row are distinct and "the k lowest" is exact; non-candidates rank last
        score = np.where(candidate, (words & _HIGH32) | np.arange(T, dtype=np.uint64), _NEVER)  # (B, T)
        return lowest(score, k)

    def ngram_sizes(self, ids: np.ndarray, candidate: np.ndarray, words: np.ndarray) -> np.ndarray:
        """(B, T) int: the words in the n-gram each token begins, 0 for the others, the rows'
        candidates cut into n-grams that never cross a non-candidate. Each word's first token
        draws its n from one more hash of its token word (whose own bits rank the n-gram and
        decide [MASK] / random / unchanged)."""
        starts = self.word_starts(ids, candidate)
        at = np.flatnonzero(starts)  # (W,) each word's first token, flat
        drawn = mix(words.reshape(-1)[at]) & _LOW32
        n = np.ones(len(at), dtype=np.intp)  # (W,)
        for bound in self.ngram_below:
            n += drawn >= bound
        runs = (starts & ~after_candidate(candidate)).reshape(-1)[at]  # (W,) no candidate before the word
        sizes = np.zeros(ids.shape, dtype=np.int64)
        sizes.reshape(-1)[at] = tile(runs, n, self.settings.max_ngram)
        return sizes

    def pick(self, starts: np.ndarray, keys: np.ndarray, words: np.ndarray) -> np.ndarray:
        """(B, T) bool: the chosen units' (words' or n-grams') first tokens, rate * (the row's
        units) of the unit starts (B, T), rounded at random, ranked by their first token's word."""
        T = starts.shape[1]
        k = np.floor(self.settings.rate * starts.sum(1) + row_uniform(keys)).astype(np.int64)  # (B,)
        return lowest(np.where(starts, (words & _HIGH32) | np.arange(T, dtype=np.uint64), _NEVER), k)

    def ngrams(self, batch: Batch, examples: np.ndarray, version: np.ndarray | int) -> np.ndarray:
        """(B, T) int: the words in each chosen n-gram at its first token, 0 elsewhere: the n-grams
        `__call__` masks, which its output cannot tell apart where two chosen ones touch."""
        if self.settings.max_ngram == 1:
            raise BertkitError("these masking settings choose no n-grams (max_ngram is 1)")
        ids = batch.input_ids
        keys = row_keys(self.seed, examples, version)
        words = token_words(keys, ids.shape[1])
        sizes = self.ngram_sizes(ids, self.candidates(ids, batch.lengths), words)
        return sizes * self.pick(sizes > 0, keys, words)

    def __call__(self, batch: Batch, examples: np.ndarray, version: np.ndarray | int) -> dict[str, torch.Tensor]:
        """Mask `batch`, whose rows are `examples` (indices), with mask version(s) `version`."""
        ids = batch.input_ids
        B, T = ids.shape
        keys = row_keys(self.seed, examples, version)
        words = token_words(keys, T)
        chosen = self.choose(ids, batch.lengths, keys, words)
        # the rest works on the N chosen positions of the flattened batch only (~15% of tokens)
        at = np.flatnonzero(chosen)  # (N,)
        draw = words.reshape(-1)[at]
        low = draw & _LOW32
        masked = np.array(ids, order="C")
        masked.reshape(-1)[at[low < self.mask_below]] = self.mask_id
        swap = (low >= self.mask_below) & (low < self.random_below)
        if swap.any():
            # one more hash of the token's word for the replacement: its high 32 bits times the
            # number of normal ids, high half, is an index in [0, n) (bias below n / 2**32)
            pick = (mix(draw[swap]) >> np.uint64(32)) * np.uint64(len(self.normal_ids)) >> np.uint64(32)
            masked.reshape(-1)[at[swap]] = self.normal_ids[pick.astype(np.intp)]
        real = np.ones(ids.shape, dtype=np.int64) if batch.lengths.min() >= T else \
            (np.arange(T) < batch.lengths[:, None]).astype(np.int64)
        labels = np.where(chosen, ids, -100)
        out = {
            "input_ids": torch.from_numpy(masked),
            "attention_mask": torch.from_numpy(real),
            "token_type_ids": torch.from_numpy(batch.token_type_ids),
            "labels": torch.from_numpy(labels),
        }
        if batch.pair_labels is not None:
            out["pair_labels"] = torch.from_numpy(batch.pair_labels)
        if self.generator_outputs:
            out["masked_positions"] = torch.from_numpy(chosen)
        return out
