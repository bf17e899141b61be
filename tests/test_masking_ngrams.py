"""ALBERT's n-gram masking (Lan et al., 2020, sec. 4.1) on real text (imdb train reviews with the
real MiniLM vocabulary): the chosen n-grams' lengths follow p(n) ~ 1/n, they are whole words that
never overlap or meet a special token or padding, the masked fraction stays at the rate, and masks
are a pure function of (seed, example, version)."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

import bertkit
from bertkit.data import MaskingCollator, MaskingSettings, PipelineSettings, pretraining_data
from bertkit.data.builders import Batch
from bertkit.data.collators import ALBERT_MASKING, tile

P_N = np.array([6, 3, 2]) / 11  # (1/n) / (1 + 1/2 + 1/3), n = 1, 2, 3


def data(corpus_file, tokenizer, cache_dir, **kw):
    base = dict(batch_size=64, max_length=128, masking=ALBERT_MASKING)
    return pretraining_data(corpus_file, tokenizer, PipelineSettings(**{**base, **kw}), cache_dir=cache_dir)


def masked(d, i, version=None):
    """Batch i of `d`: its rows before masking, the collator's output and its n-grams."""
    rows, v = d.indices(i)
    v = v if version is None else version
    batch = d.examples.batch(rows, d.tokenizer.pad_token_id)
    return batch, d.collator(batch, rows, v), d.collator.ngrams(batch, rows, v)


def ngram_positions(ids, length, start, size, continues, special):
    """The positions of the n-gram of `size` words that begins at token `start` of a row: its
    tokens up to the next word's first token, checking it holds `size` words before a special
    token or padding would end it."""
    assert start < length and not special[ids[start]]
    positions, words = [start], 1
    for t in range(start + 1, length):
        if special[ids[t]] or (not continues[ids[t]] and words == size):
            break
        words += not continues[ids[t]]
        positions.append(t)
    assert words == size, (start, size, words)
    return positions


def check_ngrams(batch, out, sizes, tokenizer, max_ngram=3):
    """The mask is exactly the union of the reported n-grams, which are disjoint runs of
    1..max_ngram whole words, each beginning at a word's first token; no special token or padding."""
    continues = tokenizer.continues_word()
    special = np.zeros(len(continues), dtype=bool)
    special[tokenizer.special_ids] = True
    chosen = (out["labels"] != -100).numpy()
    assert 0 <= sizes.min() and sizes.max(initial=0) <= max_ngram
    for b in range(len(sizes)):
        ids, length = batch.input_ids[b], batch.lengths[b]
        covered = np.zeros(len(ids), dtype=int)
        for start in np.flatnonzero(sizes[b]):
            assert start == 0 or not continues[ids[start]] or special[ids[start - 1]], "an n-gram begins inside a word"
            covered[ngram_positions(ids, length, start, sizes[b, start], continues, special)] += 1
        assert covered.max(initial=0) <= 1, "two n-grams overlap"
        assert np.array_equal(covered == 1, chosen[b])
        assert not (chosen[b] & (special[ids] | (np.arange(len(ids)) >= length))).any()


def test_albert_masking_is_bert_80_10_10_on_whole_word_trigrams():
    assert ALBERT_MASKING == MaskingSettings(rate=0.15, mask_fraction=0.8, random_fraction=0.1, whole_word=True,
                                             max_ngram=3)
    assert MaskingSettings().max_ngram == 1
    # ALBERT's recipe (mlm+sop) masks this way by default; the others keep theirs
    assert PipelineSettings(objective="mlm+sop").masking_settings == ALBERT_MASKING
    assert PipelineSettings(objective="mlm+nsp").masking_settings == MaskingSettings()


def test_ngram_lengths_follow_one_over_n(corpus_file, tokenizer, cache_dir):
    """Counting the n-grams chosen, not runs of masked words: two chosen n-grams may touch. The
    share of 1-grams sits a little above 6/11 (0.551 on 128-token rows) because a run's last
    n-gram is cut short where the run ends; 25k n-grams give a standard deviation of 0.003."""
    d = data(corpus_file, tokenizer, cache_dir)
    counts = np.zeros(4, dtype=int)
    for i in range(10):
        for version in range(4):
            counts += np.bincount(masked(d, i, version)[2].ravel(), minlength=4)
    shares = counts[1:] / counts[1:].sum()
    assert counts[1:].sum() > 20_000
    assert np.abs(shares - P_N).max() < 0.015, shares


@pytest.mark.filterwarnings("ignore::bertkit.data.DataWarning")
@pytest.mark.parametrize("objective", ["mlm", "mlm+sop"])
def test_ngrams_are_whole_words_that_never_overlap_or_cross_specials(corpus_file, tokenizer, cache_dir, objective):
    """Packed rows (one run of words) and ALBERT's sentence-order pairs (two runs, split by [SEP])."""
    d = data(corpus_file, tokenizer, cache_dir, objective=objective)
    multi = 0
    for i in range(4):
        batch, out, sizes = masked(d, i)
        check_ngrams(batch, out, sizes, tokenizer)
        multi += int((sizes > 1).sum())
    assert multi > 500  # many 2- and 3-grams, not only single words


def test_masked_fraction_is_the_rate_and_each_token_gets_80_10_10(corpus_file, tokenizer, cache_dir):
    """The expected masked fraction is exactly the rate (a random subset of n-grams holding every
    candidate); 20 batches choose ~24k tokens, a standard deviation near 0.001 on the fraction.
    [MASK] / random / unchanged is drawn per token, as in google-research/albert."""
    d = data(corpus_file, tokenizer, cache_dir)
    specials = torch.tensor(tokenizer.special_ids)
    chosen = real = 0
    kept = mask = 0
    for i in range(20):
        batch, out, _ = masked(d, i)
        source = torch.from_numpy(batch.input_ids)
        sel = out["labels"] != -100
        assert torch.equal(out["labels"][sel], source[sel]) and torch.equal(out["input_ids"][~sel], source[~sel])
        chosen += int(sel.sum())
        real += int((out["attention_mask"].bool() & ~torch.isin(source, specials)).sum())
        mask += int((out["input_ids"][sel] == tokenizer.mask_token_id).sum())
        kept += int((out["input_ids"][sel] == source[sel]).sum())
    assert abs(chosen / real - 0.15) < 0.005, chosen / real
    assert abs(mask / chosen - 0.8) < 0.015 and abs(kept / chosen - 0.1) < 0.01, (mask / chosen, kept / chosen)


def test_a_rows_ngrams_depend_only_on_its_example_and_version(corpus_file, tokenizer, cache_dir):
    """Counter-based draws (that a row masks the same in another batch, order or padding width is
    test_data_pipeline's test, run with ALBERT_MASKING too): the same version draws the same
    n-grams again, another version other ones, another seed too."""
    d = data(corpus_file, tokenizer, cache_dir, layout="full-sentences", max_length=64)
    rows, _ = d.indices(0)
    batch = d.examples.batch(rows, tokenizer.pad_token_id)
    full = d.collator(batch, rows, 5)
    assert np.array_equal(d.collator.ngrams(batch, rows, 5), d.collator.ngrams(batch, rows, 5))
    again = d.collator(batch, rows, 5)
    assert all(torch.equal(full[k], again[k]) for k in full)
    other = d.collator(batch, rows, 6)
    same = [torch.equal(full["labels"][r], other["labels"][r]) for r in range(len(rows))]
    assert not any(same)
    reseeded = MaskingCollator.for_tokenizer(tokenizer, ALBERT_MASKING, seed=1)(batch, rows, 5)
    assert not torch.equal(full["labels"], reseeded["labels"])


def reference_tile(runs, n):
    """`tile` as a loop over words: each run cut into n-grams of the drawn n, the last cut short."""
    sizes, w = np.zeros(len(n), dtype=int), 0
    while w < len(n):
        end = w + 1 + int(np.argmax(np.append(runs[w + 1:], True)))  # the next run's first word
        while w < end:
            sizes[w] = min(n[w], end - w)
            w += sizes[w]
    return sizes


@given(st.lists(st.tuples(st.booleans(), st.integers(1, 5)), min_size=1, max_size=80), st.integers(1, 5))
@settings(max_examples=200, deadline=None)
def test_tile_is_a_loop_over_words(words, max_n):
    runs = np.array([True] + [r for r, _ in words[1:]])
    n = np.minimum([k for _, k in words], max_n)
    assert np.array_equal(tile(runs, n, max_n), reference_tile(runs, n))


@given(st.lists(st.text(min_size=0, max_size=60), min_size=1, max_size=6), st.integers(0, 2**32),
       st.floats(0.05, 0.5), st.integers(2, 4))
@settings(max_examples=30, deadline=None)
def test_ngram_masking_properties_on_random_text(tokenizer, texts, seed, rate, max_ngram):
    enc = tokenizer(texts, texts[::-1])
    lengths = enc["attention_mask"].sum(1).numpy()
    batch = Batch(enc["input_ids"].numpy(), enc["token_type_ids"].numpy(), lengths)
    collate = MaskingCollator.for_tokenizer(tokenizer, MaskingSettings(rate=rate, whole_word=True, max_ngram=max_ngram),
                                            seed)
    out = collate(batch, np.arange(len(texts)), 0)
    sizes = collate.ngrams(batch, np.arange(len(texts)), 0)
    check_ngrams(batch, out, sizes, tokenizer, max_ngram)
    again = collate(batch, np.arange(len(texts)), 0)
    assert torch.equal(out["input_ids"], again["input_ids"])


def test_bad_ngram_settings_are_one_clear_error(tokenizer):
    for bad in (0, -2, 2.5, True):  # (a value of another type is refused by its type first)
        with pytest.raises(bertkit.BertkitError, match="max_ngram must be (a whole number|an integer, got)"):
            MaskingSettings(whole_word=True, max_ngram=bad)
    with pytest.raises(bertkit.BertkitError, match="masks whole words: set whole_word=True"):
        MaskingSettings(max_ngram=3)
    with pytest.raises(bertkit.BertkitError, match="choose no n-grams"):
        ids = np.array([[101, 2023, 102]])
        MaskingCollator.for_tokenizer(tokenizer).ngrams(Batch(ids, np.zeros_like(ids), np.array([3])), np.arange(1), 0)
