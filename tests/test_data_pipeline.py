"""Token cache, example builders and masking collators on real text (imdb train reviews with the
real MiniLM vocabulary): reuse and invalidation, layouts, label balance, masking statistics with
tolerances, whole words, determinism, and properties on random text (hypothesis)."""

import json
import os
import time

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

import bertkit
from bertkit.data import (ALBERT_MASKING, ELECTRA_MASKING, MaskingCollator, MaskingSettings, PipelineSettings,
                          default_layout, open_corpus, pretraining_data, tokenize_corpus)
from bertkit.data.builders import Batch, ExampleSettings, build_examples
from bertkit.data.cache import CacheSettings, cache_key, cache_root
from bertkit.data.collators import mix, mix_int
from bertkit.data.corpora import TextFiles, sentences
from bertkit.data.tokenizer import Frame, Tokenizer, wordpiece_pipeline


@pytest.fixture(scope="module")
def cached(corpus_file, tokenizer, cache_dir):
    return tokenize_corpus(open_corpus(corpus_file), tokenizer, cache_dir)


def data(corpus_file, tokenizer, cache_dir, **kw):
    base = dict(batch_size=64, max_length=64)
    return pretraining_data(corpus_file, tokenizer, PipelineSettings(**{**base, **kw}), cache_dir=cache_dir)


# ---- cache ---------------------------------------------------------------------------------------
def test_cache_holds_every_sentence_tokenized(cached, corpus_file, tokenizer):
    docs = [json.loads(line)["text"] for line in corpus_file.read_text().splitlines()]
    assert cached.num_documents == len(docs) and cached.tokens.dtype == np.uint16
    for d in (0, 17, len(docs) - 1):
        expected = [t for s in sentences(docs[d]) for t in tokenizer.encode_plain([s])[0]]
        assert cached.document(d).tolist() == expected
    assert cached.meta["tokens"] == cached.num_tokens == len(cached.tokens)


def test_byte_level_sentences_keep_the_space_before_them(tmp_path, corpus_file):
    """Byte-level BPE marks a word after a space ("ĠThe"): a sentence cut out of running text must
    not start with the bare form, which fine-tuning and inference never see. The cached document is
    the running text's own tokenization, and its sentence starts begin words for whole-word masking."""
    from bertkit.data import TokenizerSettings, train_tokenizer

    texts = [json.loads(line)["text"] for line in corpus_file.read_text().splitlines()]
    tok = train_tokenizer(texts[:200], TokenizerSettings(kind="bpe", vocab_size=600))
    one_line = [" ".join(sentences(t)) for t in texts[:40]]  # the sentences joined by single spaces
    path = tmp_path / "lines.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in one_line))
    cached = tokenize_corpus(open_corpus(path), tok, tmp_path / "cache")
    starts = tok.continues_word()
    for d, text in enumerate(one_line):
        assert cached.document(d).tolist() == tok.encode_plain([text])[0], d
        for s in range(cached.document_offsets[d] + 1, cached.document_offsets[d + 1]):  # every later sentence
            assert not starts[cached.tokens[cached.sentence_offsets[s]]], (d, s)


class Counting(TextFiles):
    reads = 0

    def documents(self, stats):
        type(self).reads += 1
        return super().documents(stats)


def test_cache_is_reused_and_invalidated_by_content_tokenizer_and_settings(tmp_path, tokenizer, monkeypatch):
    text = tmp_path / "a.txt"
    text.write_text("A first document. It has two sentences.\n\nA second one.\n")
    corpus = Counting((text,))
    first = tokenize_corpus(corpus, tokenizer, tmp_path / "c")
    again = tokenize_corpus(corpus, tokenizer, tmp_path / "c")
    assert Counting.reads == 1 and again.directory == first.directory
    assert not [p for p in (tmp_path / "c" / "tokens").iterdir() if ".tmp-" in p.name]
    text.write_text("A first document. It has two sentences.\n\nA changed one.\n")
    changed = tokenize_corpus(corpus, tokenizer, tmp_path / "c")
    assert Counting.reads == 2 and changed.directory != first.directory
    other = Tokenizer(wordpiece_pipeline(tokenizer.backend.get_vocab(), {"do_lower_case": False}), tokenizer.special_tokens)
    assert cache_key(corpus, other, CacheSettings()) != cache_key(corpus, tokenizer, CacheSettings())
    assert cache_key(corpus, tokenizer, CacheSettings(split_sentences=False)) != cache_key(corpus, tokenizer, CacheSettings())
    # chunking changes nothing in the result
    small = tokenize_corpus(TextFiles((text,)), tokenizer, tmp_path / "d", CacheSettings(chunk_documents=1))
    assert np.array_equal(small.tokens, changed.tokens)
    assert np.array_equal(small.sentence_offsets, changed.sentence_offsets)
    monkeypatch.setenv("BERTKIT_CACHE", str(tmp_path / "env"))
    assert cache_root() == tmp_path / "env" and cache_root(tmp_path / "arg") == tmp_path / "arg"
    monkeypatch.delenv("BERTKIT_CACHE")
    assert cache_root() == cache_root(os.path.expanduser("~/.cache/bertkit"))


def test_an_interrupted_build_leaves_nothing_behind(tmp_path, tokenizer):
    class Failing(TextFiles):
        def documents(self, stats):
            yield "one document"
            raise KeyboardInterrupt

    path = tmp_path / "x.txt"
    path.write_text("x")
    with pytest.raises(KeyboardInterrupt):
        tokenize_corpus(Failing((path,)), tokenizer, tmp_path / "c", CacheSettings(chunk_documents=1))
    assert list((tmp_path / "c" / "tokens").iterdir()) == []


def test_large_vocabularies_use_32_bit_tokens(tmp_path, tokenizer):
    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(70_000)])}
    big = Tokenizer(wordpiece_pipeline(vocab, {}), {"unk_token": "[UNK]", "cls_token": "[CLS]", "sep_token": "[SEP]",
                                                   "pad_token": "[PAD]", "mask_token": "[MASK]"})
    path = tmp_path / "a.txt"
    path.write_text("w69999 w3 w70000\n")
    cached = tokenize_corpus(open_corpus(path), big, tmp_path / "c")
    assert cached.tokens.dtype == np.uint32 and cached.tokens.tolist() == [vocab["w69999"], vocab["w3"], 1]



@pytest.mark.parametrize("damage, words", [
    (lambda d: os.truncate(d / "tokens.bin", 6), "tokens.bin holds 3 of "),
    (lambda d: os.truncate(d / "sentences.bin", 16), "sentences.bin holds 2 of 4 sentence offsets"),
    (lambda d: os.truncate(d / "documents.bin", 16), "documents.bin holds 2 of 3 document offsets"),
    (lambda d: (d / "tokens.bin").unlink(), "tokens.bin is missing"),
    (lambda d: (d / "meta.json").write_text("{"), "its meta.json is not the JSON a build writes"),
    (lambda d: (d / "meta.json").unlink(), "it has no meta.json"),  # a rename onto it failed: Directory not empty
    (lambda d: (d / "tokens.bin").write_bytes(b"\xff\xff" * (os.path.getsize(d / "tokens.bin") // 2)),
     "tokens.bin holds id 65535, beyond the vocabulary's 30522"),
    (lambda d: (d / "sentences.bin").write_bytes(np.arange(4, dtype=np.int64)[::-1].tobytes()),
     "sentences.bin holds offsets that do not run from 0 to"),
], ids=["tokens-cut", "sentences-cut", "documents-cut", "tokens-deleted", "meta-not-json", "meta-deleted",
        "ids-beyond-vocab", "offsets-overwritten"])
def test_a_damaged_cache_is_rebuilt_with_one_warning(tmp_path, tokenizer, damage, words):
    """A cache cut short was read as another document structure (documents.bin: silently) or failed
    later (IndexError, FileNotFoundError, JSONDecodeError); a folder without meta.json made every
    later build fail to rename onto it."""
    path = tmp_path / "a.txt"
    path.write_text("A first document. It has two sentences.\n\nA second one.\n")
    fresh = tokenize_corpus(open_corpus(path), tokenizer, tmp_path / "c")
    expected = [np.array(a).copy() for a in (fresh.tokens, fresh.sentence_offsets, fresh.document_offsets)]
    damage(fresh.directory)
    with pytest.warns(bertkit.data.DataWarning) as caught:
        again = tokenize_corpus(open_corpus(path), tokenizer, tmp_path / "c")
    message = str(caught[0].message)
    assert f"the token cache at {fresh.directory} was damaged ({words}" in message and "rebuilt" in message
    assert again.directory == fresh.directory and list((tmp_path / "c" / "tokens").iterdir()) == [fresh.directory]
    for a, b in zip(expected, (again.tokens, again.sentence_offsets, again.document_offsets)):
        assert np.array_equal(a, b)


def test_undecodable_bytes_are_reported_again_when_the_cache_is_reused(tmp_path, tokenizer):
    path = tmp_path / "latin1.txt"
    path.write_bytes("good line\n".encode() + "caf\xe9 cr\xe8me\n".encode("latin-1"))
    for _ in range(2):  # built, then reused
        with pytest.warns(bertkit.data.DataWarning, match=r"1 line\(s\) had bytes that are not UTF-8"):
            tokenize_corpus(open_corpus(path), tokenizer, tmp_path / "c")


def test_a_cache_folder_that_cannot_be_written_is_one_line(tmp_path, tokenizer, monkeypatch):
    path = tmp_path / "a.txt"
    path.write_text("One document.\n")
    monkeypatch.setenv("BERTKIT_CACHE", str(path))  # a file, not a folder
    with pytest.raises(bertkit.BertkitError, match=f"BERTKIT_CACHE={path}: the cache cannot be written there "
                                                   r"\(Not a directory\); give a writable folder "
                                                   r"\(BERTKIT_CACHE=DIR\)"):
        tokenize_corpus(open_corpus(path), tokenizer)
    with pytest.raises(bertkit.BertkitError, match=f"cache_dir={path}: the cache cannot be written there"):
        tokenize_corpus(open_corpus(path), tokenizer, path)

    def refused(*args):  # as a read-only mount answers (as root, os.access says yes there)
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(bertkit.data.cache, "staging_dir", refused)
    with pytest.raises(bertkit.BertkitError, match=r"cache_dir=.*: the cache cannot be written there \(Operation "):
        tokenize_corpus(open_corpus(path), tokenizer, tmp_path / "c")


def test_stale_build_folders_are_removed_and_concurrent_builds_all_succeed(tmp_path, tokenizer):
    """A build killed part-way (SIGKILL) leaves its temporary folder: removed by a later build once
    nothing in it was written for a day, so a live build of the same key is never touched."""
    from concurrent.futures import ThreadPoolExecutor

    tokens = tmp_path / "c" / "tokens"
    stale, live = tokens / "0123.tmp-old", tokens / "0123.tmp-live"
    for folder in (stale, live):
        folder.mkdir(parents=True)
        (folder / "tokens.bin").write_bytes(b"\0" * 10)
    day_ago = time.time() - 25 * 3600
    for p in (stale / "tokens.bin", stale, live):  # the live build's folder is old, its file is being written
        os.utime(p, (day_ago, day_ago))
    path = tmp_path / "a.txt"
    path.write_text("A first document. It has two sentences.\n\nA second one.\n")
    with ThreadPoolExecutor(3) as pool:
        built = list(pool.map(lambda _: tokenize_corpus(open_corpus(path), tokenizer, tmp_path / "c"), range(3)))
    assert len({b.directory for b in built}) == 1
    assert sorted(p.name for p in tokens.iterdir()) == sorted([live.name, built[0].directory.name])


# ---- builders ------------------------------------------------------------------------------------
def test_packed_rows_are_full_and_follow_the_stream(cached, tokenizer):
    ex = build_examples(cached, tokenizer.frame, 102, ExampleSettings("packed", 64))
    batch = ex.batch(np.arange(len(ex)), tokenizer.pad_token_id)
    assert (batch.lengths == 64).all() and (batch.input_ids[:, 0] == 101).all() and (batch.input_ids[:, -1] == 102).all()
    content = batch.input_ids[:, 1:-1].ravel()
    stream = np.concatenate([np.append(cached.document(d), 102) for d in range(cached.num_documents)])[:-1]
    assert np.array_equal(content, stream[:len(content)]) and len(stream) - len(content) == ex.stats.dropped_tokens < 62
    assert ex.stats.long_documents == int((np.diff(cached.document_token_offsets()) > 62).sum())


def test_full_sentences_rows_hold_whole_sentences_across_documents(cached, tokenizer):
    ex = build_examples(cached, tokenizer.frame, 102, ExampleSettings("full-sentences", 64))
    sent = np.asarray(cached.sentence_offsets)
    doc_of = np.repeat(np.arange(cached.num_documents), np.diff(np.asarray(cached.document_offsets)))
    virtual_starts = set((sent[:-1] + doc_of).tolist())
    virtual_ends = set((sent[1:] + doc_of).tolist())
    long = {s for s, e in zip(sent[:-1] + doc_of, sent[1:] + doc_of) if e - s > 62}
    for start, length in zip(ex.starts, ex.lengths):
        assert 0 < length <= 62
        cut = any(s <= start < s + 10_000 for s in long)
        assert cut or (start in virtual_starts and start + length in virtual_ends)
    batch = ex.batch(np.arange(50), tokenizer.pad_token_id)
    rows_crossing = (batch.input_ids[:, 1:-1] == 102).any(1)
    assert rows_crossing.any()  # some rows pack the end of one review with the next
    # nothing dropped: all rows' content, separators aside, is the token stream
    everything = ex.batch(np.arange(len(ex)), tokenizer.pad_token_id)
    content = everything.input_ids[:, 1:-1][np.arange(62) < everything.lengths[:, None] - 2]
    assert np.array_equal(content[content != 102], np.asarray(cached.tokens)[np.asarray(cached.tokens) != 102])


@pytest.mark.parametrize("layout", ["nsp", "sop"])
def test_pair_examples_are_balanced_and_real_pairs_are_consecutive(cached, tokenizer, layout):
    ex = build_examples(cached, tokenizer.frame, 102, ExampleSettings(layout, 64, seed=3))
    table, labels = ex.table, ex.labels
    assert abs(labels.mean() - 0.5) < 0.03, labels.mean()
    doc_tokens = cached.document_token_offsets()
    doc = lambda t: np.searchsorted(doc_tokens, t, side="right") - 1  # noqa: E731
    a0, a1, b0, b1 = table[:, 0], table[:, 1], table[:, 2], table[:, 3]
    assert ((a1 > a0) & (b1 > b0) & ((a1 - a0) + (b1 - b0) <= 61)).all()
    real = labels == 0
    assert (a1[real] <= b0[real]).all() and (doc(a0[real]) == doc(b1[real] - 1)).all()
    if layout == "nsp":
        assert (doc(a0[~real]) != doc(b0[~real])).all()  # NotNext: from another review
    else:
        assert (b1[~real] <= a0[~real]).all() and (doc(a0[~real]) == doc(b0[~real])).all()  # swapped
    batch = ex.batch(np.arange(40), tokenizer.pad_token_id)
    for i in range(40):
        n = batch.lengths[i]
        ids, types = batch.input_ids[i, :n], batch.token_type_ids[i, :n]
        la = a1[i] - a0[i]
        assert ids[0] == 101 and ids[la + 1] == 102 and ids[n - 1] == 102
        assert (types[:la + 2] == 0).all() and (types[la + 2:] == 1).all()
        assert (batch.input_ids[i, n:] == tokenizer.pad_token_id).all()
    again = build_examples(cached, tokenizer.frame, 102, ExampleSettings(layout, 64, seed=3))
    assert np.array_equal(ex.table, again.table) and np.array_equal(ex.labels, again.labels)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 300), st.integers(1, 300), st.integers(2, 300))
def test_a_pair_is_trimmed_to_the_lengths_truncate_seq_pair_keeps(la, lb, budget):
    """The lengths kept are those of BERT's create_pretraining_data loop, which trims the longer
    side one token at a time, and B on a tie; the one segment that is cut is cut at one end."""
    from bertkit.data.builders import _trim

    a, b = la, lb
    while a + b > budget:
        a, b = (a - 1, b) if a > b else (a, b - 1)
    a0, a1, b0, b1, cut = _trim(100, 100 + la, 500, 500 + lb, budget, np.random.default_rng(la * 1000 + lb))
    assert (a1 - a0, b1 - b0, cut) == (a, b, la + lb - a - b)
    assert (a0 == 100 or a1 == 100 + la) and (b0 == 500 or b1 == 500 + lb)


def test_a_short_target_is_drawn_per_document_for_pairs_and_per_example_for_segments():
    """create_instances_from_document draws its target length once per document; ELECTRA's
    ExampleBuilder after each example."""
    from bertkit.data.builders import _chunks

    starts = list(range(0, 4000, 5))  # 40 documents of 20 five-token segments
    ends = [s + 5 for s in starts]
    docs = list(range(0, 801, 20))
    for per_document in (True, False):
        targets: dict[int, list[int]] = {}

        def emit(d, first, last, target):
            targets.setdefault(d, []).append(target)
            return last - first + 1

        _chunks(starts, ends, docs, 30, 0.5, np.random.default_rng(0), emit, per_document=per_document)
        mixed = sum(len(set(t)) > 1 for t in targets.values())
        shortened = sum(any(x < 30 for x in t) for t in targets.values())
        assert len(targets) == 40 and 5 < shortened < 40
        assert (mixed == 0) if per_document else (mixed > 10), (per_document, mixed)


def test_segments_are_electras_examples(cached, tokenizer):
    """ELECTRA's ExampleBuilder: consecutive sentences of one document, [CLS] A [SEP] B [SEP] with B
    type 1 and no label; one segment when a 10% draw says so. A full-length example always has
    room for B, so there the single-segment share is that draw alone; elsewhere (a review's last
    sentences, two-sentence examples whose A took both) it is higher, as in the released script."""
    T, budget = 64, 61
    tables = [build_examples(cached, tokenizer.frame, 102, ExampleSettings("segments", T, seed=s)) for s in range(5)]
    ex = tables[0]
    assert ex.labels is None and ex.stats.truncated_tokens == 0
    sent = np.asarray(cached.sentence_offsets)
    lengths = np.diff(sent)
    assert ex.stats.split_sentences == int((lengths > budget // 2).sum())
    # example boundaries are sentence boundaries, or cuts of an overlong sentence every budget // 2 tokens
    cuts = [s + k for s, n in zip(sent[:-1], lengths) for k in range(budget // 2, n, budget // 2)]
    boundaries = np.union1d(sent, cuts)
    doc_tokens = cached.document_token_offsets()
    doc = lambda t: np.searchsorted(doc_tokens, t, side="right") - 1  # noqa: E731
    for e in tables:
        a0, a1, b0, b1 = e.table.T
        # every token in exactly one example, in order; A's last sentence right before B's first
        assert a0[0] == 0 and b1[-1] == cached.num_tokens and np.array_equal(a0[1:], b1[:-1])
        assert ((a1 > a0) & (b0 == a1) & (b1 >= b0) & (b1 - a0 <= budget)).all()
        assert np.isin(e.table, boundaries).all() and (doc(a0) == doc(b1 - 1)).all()
    single = np.concatenate([e.table[:, 3] == e.table[:, 2] for e in tables])
    full = np.concatenate([e.table[:, 3] - e.table[:, 0] >= 2 * (budget // 2) for e in tables])
    assert full.sum() > 2000 and abs(single[full].mean() - 0.1) < 0.025, single[full].mean()  # sd 0.0065
    assert 0.1 < single.mean() < 0.4, single.mean()
    rows = np.arange(300)
    batch = ex.batch(rows, tokenizer.pad_token_id)
    assert batch.pair_labels is None and batch.lengths.max() <= T
    for i in rows:
        a0, a1, b0, b1 = ex.table[i]
        n, la, lb = batch.lengths[i], a1 - a0, b1 - b0
        ids, types = batch.input_ids[i], batch.token_type_ids[i]
        assert n == la + 2 + (lb + 1 if lb else 0) and ids[0] == 101 and ids[la + 1] == 102 and ids[n - 1] == 102
        assert np.array_equal(ids[1:la + 1], cached.tokens[a0:a1])
        assert np.array_equal(ids[la + 2:n - 1], cached.tokens[b0:b1])
        assert (types[:la + 2] == 0).all() and (types[la + 2:n] == 1).all() and (types[n:] == 0).all()
    assert np.array_equal(ex.table, build_examples(cached, tokenizer.frame, 102, ExampleSettings("segments", T)).table)
    assert not np.array_equal(ex.table[:50], tables[1].table[:50])


def test_segments_follow_the_familys_frame(cached):
    """RoBERTa's <s> A </s></s> B </s> has four special tokens: the budget shrinks to fit them."""
    frame = Frame(single=((0, 0), ("A", 0), (2, 0)), pair=((0, 0), ("A", 0), (2, 0), (2, 0), ("B", 0), (2, 0)))
    ex = build_examples(cached, frame, 2, ExampleSettings("segments", 32))
    batch = ex.batch(np.arange(len(ex)), 1)
    two = ex.table[:, 3] > ex.table[:, 2]
    assert batch.lengths.max() <= 32 and (batch.lengths[two] == (ex.table[:, 3] - ex.table[:, 0] + 4)[two]).all()
    assert (batch.token_type_ids == 0).all() and (batch.input_ids[:, 0] == 0).all()


# ---- collators -----------------------------------------------------------------------------------
def _stats(batches, tokenizer):
    chosen = real = 0
    counts = {"mask": 0, "random": 0, "same": 0}
    specials = torch.tensor(tokenizer.special_ids)
    for b, source in batches:
        sel = b["labels"] != -100
        assert not torch.isin(source[sel], specials).any(), "a special token was chosen"
        assert not sel[b["attention_mask"] == 0].any(), "padding was chosen"
        assert torch.equal(b["labels"][sel], source[sel])
        assert torch.equal(b["input_ids"][~sel], source[~sel])
        new = b["input_ids"][sel]
        counts["mask"] += int((new == tokenizer.mask_token_id).sum())
        counts["same"] += int((new == source[sel]).sum())
        counts["random"] += int(((new != tokenizer.mask_token_id) & (new != source[sel])).sum())
        assert not torch.isin(new[new != source[sel]], specials[specials != tokenizer.mask_token_id]).any()
        chosen += int(sel.sum())
        real += int((b["attention_mask"].bool() & ~torch.isin(source, specials)).sum())
    return chosen / real, {k: v / chosen for k, v in counts.items()}


def _unmasked(d, i):
    """Batch i before masking (the builder's output for the same rows)."""
    rows, _ = d.indices(i)
    return torch.from_numpy(d.examples.batch(rows, d.tokenizer.pad_token_id).input_ids)


@pytest.mark.filterwarnings("ignore::bertkit.data.DataWarning")  # nsp trims a few tokens at T=64
@pytest.mark.parametrize("layout", ["packed", "full-sentences", "nsp", "sop", "segments"])
def test_masking_rate_and_80_10_10_never_specials_or_padding(corpus_file, tokenizer, cache_dir, layout):
    d = data(corpus_file, tokenizer, cache_dir, layout=layout, objective="mlm+nsp" if layout == "nsp" else "mlm")
    rate, split = _stats([(d.batch_at(i), _unmasked(d, i)) for i in range(20)], tokenizer)
    # about 80k candidate tokens, 12k chosen: binomial sd of the split shares is ~0.004
    assert abs(rate - 0.15) < 0.005, rate
    assert abs(split["mask"] - 0.8) < 0.02 and abs(split["random"] - 0.1) < 0.015 and abs(split["same"] - 0.1) < 0.015, split


def test_whole_word_masking_keeps_words_together(corpus_file, tokenizer, cache_dir):
    d = data(corpus_file, tokenizer, cache_dir, masking=MaskingSettings(whole_word=True))
    table = tokenizer.continues_word()
    pieces = 0
    for i in range(10):
        b, source = d.batch_at(i), _unmasked(d, i).numpy()
        chosen = (b["labels"] != -100).numpy()
        cont = table[source] & np.concatenate([np.zeros((len(source), 1), bool), ~np.isin(source[:, :-1], tokenizer.special_ids)], 1)
        # a continuation piece is chosen exactly when the token before it is
        assert np.array_equal(chosen[:, 1:][cont[:, 1:]], chosen[:, :-1][cont[:, 1:]])
        pieces += int((chosen & cont).sum())
    assert pieces > 50  # multi-piece words were masked, not only single-piece ones
    rate, _ = _stats([(d.batch_at(i), _unmasked(d, i)) for i in range(10)], tokenizer)
    assert abs(rate - 0.15) < 0.01, rate


def test_whole_word_masking_chooses_each_token_at_the_rate_however_long_its_word(tokenizer):
    # Short rows of long words (made-up words of 2-6 WordPiece pieces): a budget of tokens filled
    # word by word overshoots by part of the last word (22.7% at 0.15 on these rows); choosing
    # rate x the row's words gives every token the probability `rate`.
    rng = np.random.default_rng(0)
    letters = np.array(list("bcdfghjklmnpqrstvwxz"))
    texts = [" ".join("".join(rng.choice(letters, rng.integers(3, 12))) for _ in range(12)) for _ in range(400)]
    enc = tokenizer(texts, max_length=32, truncation=True)
    ids, lengths = enc["input_ids"].numpy(), enc["attention_mask"].sum(1).numpy()
    batch = Batch(ids, enc["token_type_ids"].numpy(), lengths)
    collate = MaskingCollator.for_tokenizer(tokenizer, MaskingSettings(whole_word=True), seed=3)
    candidates = collate.candidates(ids, lengths)
    words = collate.word_starts(ids, candidates).sum()
    assert candidates.sum() > 2.5 * words  # long words, as intended
    chosen = sum(int((collate(batch, np.arange(len(texts)), v)["labels"] != -100).sum()) for v in range(10))
    rate = chosen / (10 * candidates.sum())
    # ~12k candidate tokens x 10 masks, in ~4.4k words x 10: the rate's sd is ~0.002
    assert abs(rate - 0.15) < 0.007, rate


def test_masks_are_deterministic_dynamic_per_epoch_and_static_repeat(corpus_file, tokenizer, cache_dir):
    d = data(corpus_file, tokenizer, cache_dir)
    n = d.batches_per_epoch
    first = d.batch_at(3)
    d.batch_at(n + 7)
    again = data(corpus_file, tokenizer, cache_dir).batch_at(3)
    assert all(torch.equal(first[k], again[k]) for k in first)
    assert all(torch.equal(first[k], d.batch_at(np.int64(3))[k]) for k in first)  # any integer type
    with pytest.raises(bertkit.BertkitError, match="batch index must be a whole number, got 3.0"):
        d.batch_at(3.0)  # (NumPy's seeding failed on it)
    assert not torch.equal(first["labels"], data(corpus_file, tokenizer, cache_dir, seed=1).batch_at(3)["labels"])

    def masks_by_example(d, epoch):
        out = {}
        for j in range(3):
            rows, _ = d.indices(epoch * d.batches_per_epoch + j)
            b = d.batch_at(epoch * d.batches_per_epoch + j)
            out.update({int(r): b["labels"][k] for k, r in enumerate(rows)})
        return out

    dynamic = [masks_by_example(d, e) for e in range(3)]
    static = data(corpus_file, tokenizer, cache_dir, static_masks=2)
    fixed = [masks_by_example(static, e) for e in range(3)]
    for masks, repeats in ((dynamic, False), (fixed, True)):
        common = set(masks[0]) & set(masks[2])
        assert len(common) > 5
        same = [torch.equal(masks[0][r], masks[2][r]) for r in common]
        assert all(same) if repeats else not any(same)
        differ = set(masks[0]) & set(masks[1])
        assert not any(torch.equal(masks[0][r], masks[1][r]) for r in differ)


@pytest.mark.parametrize("masking", [MaskingSettings(), MaskingSettings(whole_word=True), ALBERT_MASKING],
                         ids=["tokens", "whole-words", "albert-ngrams"])
def test_a_rows_mask_depends_only_on_its_example_and_version(corpus_file, tokenizer, cache_dir, masking):
    """Counter-based draws: a row masks the same in another batch, in another order, padded wider,
    and with its version given per row instead of once."""
    d = data(corpus_file, tokenizer, cache_dir, layout="full-sentences", masking=masking)
    pad = tokenizer.pad_token_id
    rows, _ = d.indices(0)
    full = d.collator(d.examples.batch(rows, pad), rows, 5)
    assert (full["attention_mask"] == 0).any()  # some rows are padded
    sub = rows[::-3]
    b = d.examples.batch(sub, pad)
    wide = Batch(np.pad(b.input_ids, ((0, 0), (0, 9)), constant_values=pad), np.pad(b.token_type_ids, ((0, 0), (0, 9))),
                 b.lengths)
    out = d.collator(wide, sub, np.full(len(sub), 5))
    where = [list(rows).index(r) for r in sub]
    for key in ("input_ids", "labels"):
        assert torch.equal(out[key][:, :64], full[key][where])
    assert (out["labels"][:, 64:] == -100).all()


def test_scalar_and_array_hashes_agree():
    x = np.random.default_rng(0).integers(0, 2**64 - 1, 1000, dtype=np.uint64, endpoint=True)
    x[:2] = 0, 2**64 - 1
    assert [mix_int(int(v)) for v in x] == mix(x).tolist()


def test_random_replacements_are_uniform_over_normal_tokens():
    V, special = 1000, [0, 1, 2, 3, 500]
    collate = MaskingCollator(mask_id=1, vocab_size=V, special_ids=special,
                              settings=MaskingSettings(rate=0.5, mask_fraction=0.0, random_fraction=1.0))
    ids = np.full((200, 100), 7, dtype=np.int64)
    out = collate(Batch(ids, np.zeros_like(ids), np.full(200, 100)), np.arange(200), 0)
    chosen = (out["labels"] != -100).numpy()
    drawn = out["input_ids"].numpy()[chosen]
    assert len(drawn) == 10_000 and not np.isin(drawn, special).any()
    counts = np.bincount(drawn // 100, minlength=10)  # ten bins of 100 ids: 96, 100, ..., 99, ... normal ones
    expected = 10_000 * np.array([96] + [100] * 4 + [99] + [100] * 4) / 995
    assert (np.abs(counts - expected) < 4 * np.sqrt(expected)).all(), counts


def test_electra_generator_input(corpus_file, tokenizer, cache_dir):
    d = data(corpus_file, tokenizer, cache_dir, objective="rtd")
    assert d.collator.settings == ELECTRA_MASKING
    batches = [(d.batch_at(i), _unmasked(d, i)) for i in range(15)]
    for b, _ in batches:
        assert torch.equal(b["masked_positions"], b["labels"] != -100)
    rate, split = _stats(batches, tokenizer)
    assert abs(rate - 0.15) < 0.005 and split["random"] == 0 and abs(split["mask"] - 0.85) < 0.02


def test_rtd_trains_the_segment_embedding(corpus_file, tokenizer, cache_dir):
    """ELECTRA pre-trained on its own examples: B's tokens are type 1, so the embedding a pair task
    fine-tunes from was trained; short targets are its 5%."""
    assert default_layout("rtd") == default_layout("rtd", "electra") == "segments"
    assert PipelineSettings(objective="rtd").example_settings.short_length_prob == 0.05
    assert PipelineSettings(objective="mlm+nsp").example_settings.short_length_prob == 0.1
    d = data(corpus_file, tokenizer, cache_dir, objective="rtd")
    b = d.batch_at(0)
    types, real = b["token_type_ids"], b["attention_mask"].bool()
    assert "pair_labels" not in b and (types == 1).any(1).float().mean() > 0.5
    assert not (types.bool() & ~real).any() and set(types.unique().tolist()) == {0, 1}


def test_nsp_batches_carry_pair_labels(corpus_file, tokenizer, cache_dir):
    d = data(corpus_file, tokenizer, cache_dir, objective="mlm+sop")
    b = d.batch_at(0)
    assert b["pair_labels"].shape == (64,) and set(b["pair_labels"].tolist()) == {0, 1}
    assert b["input_ids"].dtype == b["labels"].dtype == torch.int64 and b["input_ids"].shape == (64, 64)


@given(st.lists(st.text(min_size=0, max_size=60), min_size=1, max_size=6), st.integers(0, 2**32),
       st.booleans(), st.floats(0.05, 0.5))
@settings(max_examples=40, deadline=None)
def test_collator_properties_on_random_text(tokenizer, texts, seed, whole_word, rate):
    enc = tokenizer(texts)
    ids = enc["input_ids"].numpy()
    lengths = enc["attention_mask"].sum(1).numpy()
    batch = Batch(ids, enc["token_type_ids"].numpy(), lengths)
    collate = MaskingCollator.for_tokenizer(tokenizer, MaskingSettings(rate=rate, whole_word=whole_word), seed)
    out = collate(batch, np.arange(len(texts)), 0)
    chosen = (out["labels"] != -100).numpy()
    special = np.isin(ids, tokenizer.special_ids)
    real = np.arange(ids.shape[1]) < lengths[:, None]
    assert not (chosen & (special | ~real)).any()
    assert np.array_equal(out["labels"].numpy()[chosen], ids[chosen])
    assert np.array_equal(out["input_ids"].numpy()[~chosen], ids[~chosen])
    candidates = (real & ~special).sum(1)
    if not whole_word:  # exactly floor or ceil of rate * candidates per row
        assert (np.abs(chosen.sum(1) - rate * candidates) < 1).all()
    again = collate(batch, np.arange(len(texts)), 0)
    assert torch.equal(out["input_ids"], again["input_ids"])


def test_settings_are_validated():
    with pytest.raises(bertkit.BertkitError, match="masking rate"):
        MaskingSettings(rate=0)
    with pytest.raises(bertkit.BertkitError, match="sum to at most 1"):
        MaskingSettings(mask_fraction=0.9, random_fraction=0.2)
    with pytest.raises(bertkit.BertkitError, match="unknown example layout"):
        ExampleSettings(layout="docs")
    with pytest.raises(bertkit.BertkitError, match="unknown objective"):
        PipelineSettings(objective="clm")


def test_too_small_corpus_for_a_batch_or_nsp(tmp_path, tokenizer):
    path = tmp_path / "one.txt"
    path.write_text("Just one short document. With two sentences.\n")
    with pytest.raises(bertkit.BertkitError, match="fewer than one batch"):
        pretraining_data(path, tokenizer, PipelineSettings(batch_size=8), cache_dir=tmp_path / "c")
    with pytest.raises(bertkit.BertkitError, match="at least two documents"):
        pretraining_data(path, tokenizer, PipelineSettings(objective="mlm+nsp"), cache_dir=tmp_path / "c")
