"""Tokenizers against transformers: loading every file kind (MiniLM's real vocabulary over a
battery of hard text; RoBERTa vocab.json + merges.txt and DeBERTa-v3 spm.model built here),
training every kind, the special-token frame the data pipeline uses, and bad files."""

import json
import shutil

import numpy as np
import pytest
import transformers
from hypothesis import given, settings, strategies as st

import bertkit
from bertkit.data import TokenizerSettings, check_vocab_fits, train_tokenizer
from test_minilm import SENTENCES

HARD = [
    "", " ", "   \t  \n ", "\n\n", "a", "A", "Hello, World!", "don't stop-believing... (really)?",
    "Ünïcödé ÀÉÎÕÜ café naïve résumé coöperate façade Straße ǅ ﬁ", "İstanbul ıi", "Ελληνικά Кириллица עברית العربية",
    "東京は日本の首都です。中文分词测试", "한국어 텍스트", "ｆｕｌｌｗｉｄｔｈ　ｓｐａｃｅ", "emoji 🙂🚀🔥 👍🏽 👨‍👩‍👧 🇫🇷",
    "control\x00chars\x01\x7f here\u200b\u200d\ufeff", "tab\tseparated\tvalues\r\nwindows", "\u00a0nbsp\u2003em space",
    "a" * 120, "supercalifragilisticexpialidocious" * 4, "x" * 101 + " y", "1234567890 3.14159 1e-9 $100,000.00",
    "[MASK] [CLS] [SEP] [PAD] [UNK] inside text", "<mask> <s> </s>", "e\u0301 combining accent", "ﬀ ligatures ﬃ",
    "http://example.com/path?q=1&r=2#frag user@example.org", "   leading and trailing   ",
    "MiXeD CaSe WoRdS", "\U0001F600" * 30, "\x85next line\u2028line sep\u2029para sep",
]

PAIRS = [("How old are you?", "I am six."), ("", "only the second part"), ("Ünïcödé", "日本語")]


@pytest.fixture(scope="module")
def reference(minilm_dir):
    return transformers.AutoTokenizer.from_pretrained(minilm_dir)


@pytest.fixture(scope="module")
def corpus_texts():
    from bertkit.data import builtin

    return [r.text for r in builtin("imdb").train[:1500]]


@pytest.mark.parametrize("source", ["dir", "tokenizer.json", "vocab.txt"])
def test_ids_equal_transformers(minilm_dir, reference, source, tmp_path):
    if source == "dir":
        path = minilm_dir
    elif source == "tokenizer.json":
        path = minilm_dir / "tokenizer.json"
    else:  # a bare vocab.txt with the casing its tokenizer_config.json declares
        shutil.copy(minilm_dir / "vocab.txt", tmp_path)
        shutil.copy(minilm_dir / "tokenizer_config.json", tmp_path)
        path = tmp_path / "vocab.txt"
    tok = bertkit.load_tokenizer(path)
    for text in SENTENCES:
        assert tok.encode(text) == reference.encode(text), text
    for a, b in PAIRS:
        assert tok.encode(a, b) == reference.encode(a, b), (a, b)
    assert tok.mask_token == "[MASK]" and tok.mask_token_id == reference.mask_token_id


def test_batch_is_right_padded_with_segments(minilm_dir):
    tok = bertkit.load_tokenizer(minilm_dir)
    batch = tok(["short", "a somewhat longer text here"], ["pair one", "pair two"])
    ids, mask, types = batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]
    assert ids.shape == mask.shape == types.shape
    assert mask[0].sum() < mask[1].sum() and mask[1].all()
    assert (ids[0][mask[0] == 0] == tok.pad_token_id).all()
    assert types[0][mask[0].bool()].tolist() == [0] * 3 + [1] * 3


def test_saved_model_carries_a_tokenizer_transformers_loads(minilm_dir, reference, tmp_path):
    model = bertkit.from_pretrained(minilm_dir)
    model.save_pretrained(tmp_path)
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "config.json", "model.safetensors"):
        assert (tmp_path / name).exists(), name
    reloaded = transformers.AutoTokenizer.from_pretrained(tmp_path)
    for text in SENTENCES:
        assert reloaded.encode(text) == reference.encode(text)
    assert bertkit.from_pretrained(tmp_path).tokenizer.encode("Hello there") == reference.encode("Hello there")


def test_bad_tokenizer_files_are_named(tmp_path):
    with pytest.raises(bertkit.BertkitError, match="no such file"):
        bertkit.load_tokenizer(tmp_path / "nope.json")
    with pytest.raises(bertkit.BertkitError, match="no tokenizer.json, vocab.txt, vocab.json, spm.model in this directory"):
        bertkit.load_tokenizer(tmp_path)
    broken = tmp_path / "tokenizer.json"
    broken.write_text("{not json")
    with pytest.raises(bertkit.BertkitError, match="tokenizer.json"):
        bertkit.load_tokenizer(broken)
    (tmp_path / "vocab.json").write_text(json.dumps({"<s>": 0, "</s>": 1}))
    with pytest.raises(bertkit.BertkitError, match="merges.txt"):
        bertkit.load_tokenizer(tmp_path / "vocab.json")
    (tmp_path / "spm.model").write_bytes(b"\xff\xff\xff")
    with pytest.raises(bertkit.BertkitError, match="spm.model: not a readable SentencePiece model"):
        bertkit.load_tokenizer(tmp_path / "spm.model")


@pytest.mark.parametrize("source", ["dir", "tokenizer.json", "vocab.txt"])
def test_minilm_hard_text_battery_equals_bert_tokenizer_fast(minilm_dir, source, tmp_path):
    reference = transformers.BertTokenizerFast.from_pretrained(minilm_dir)
    if source == "vocab.txt":
        shutil.copy(minilm_dir / "vocab.txt", tmp_path)
        shutil.copy(minilm_dir / "tokenizer_config.json", tmp_path)
        path = tmp_path / "vocab.txt"
    else:
        path = minilm_dir if source == "dir" else minilm_dir / "tokenizer.json"
    tok = bertkit.load_tokenizer(path)
    for text in HARD:
        assert tok.encode(text) == reference.encode(text), repr(text)
    for a, b in zip(HARD, reversed(HARD)):
        assert tok.encode(a, b) == reference.encode(a, b), (a, b)


def test_vocab_txt_casing_follows_tokenizer_config(minilm_dir, tmp_path):
    """A cased config (do_lower_case false) keeps capitals and accents; transformers reads the
    same vocab.txt + config the same way."""
    shutil.copy(minilm_dir / "vocab.txt", tmp_path)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": False}))
    cased = bertkit.load_tokenizer(tmp_path / "vocab.txt")
    reference = transformers.BertTokenizerFast.from_pretrained(tmp_path)
    uncased = bertkit.load_tokenizer(minilm_dir / "vocab.txt")
    assert cased.encode("Hello World") != uncased.encode("Hello World")
    for text in HARD:
        assert cased.encode(text) == reference.encode(text), repr(text)


@given(st.text(max_size=80), st.text(max_size=40))
@settings(max_examples=60, deadline=None)
def test_random_text_equals_transformers_and_frames_like_encode(minilm_tokenizers, a, b):
    ours, reference = minilm_tokenizers
    assert ours.encode(a) == reference.encode(a)
    assert ours.encode(a, b) == reference.encode(a, b)
    # the data pipeline's path: ids without specials, framed afterwards, must equal encode
    pa, pb = ours.encode_plain([a, b])
    ids, types = ours.frame.apply(np.array(pa), np.array(pb) if b else None)
    assert ids.tolist() == ours.encode(a, b)
    assert types.tolist() == ours.backend.encode(a, b or None).type_ids


@pytest.fixture(scope="module")
def minilm_tokenizers(minilm_dir):
    return bertkit.load_tokenizer(minilm_dir), transformers.BertTokenizerFast.from_pretrained(minilm_dir)


@pytest.fixture(scope="module")
def roberta_files(tmp_path_factory, corpus_texts):
    directory = tmp_path_factory.mktemp("roberta")
    trained = train_tokenizer(corpus_texts, TokenizerSettings(kind="bpe", vocab_size=1200))
    trained.backend.model.save(str(directory))  # writes vocab.json and merges.txt
    return directory


def test_roberta_vocab_and_merges_equal_transformers(roberta_files):
    ours = bertkit.load_tokenizer(roberta_files / "vocab.json")
    reference = transformers.RobertaTokenizerFast.from_pretrained(roberta_files)
    assert bertkit.load_tokenizer(roberta_files).encode("same from the folder") == ours.encode("same from the folder")
    for text in HARD + SENTENCES:
        assert ours.encode(text) == reference.encode(text), repr(text)
    for a, b in PAIRS:
        assert ours.encode(a, b) == reference.encode(a, b)
    assert ours.mask_token_id == reference.mask_token_id and ours.pad_token_id == reference.pad_token_id


def test_deberta_v3_spm_model_equals_transformers(tmp_path, corpus_texts):
    spm = pytest.importorskip("sentencepiece")
    pytest.importorskip("google.protobuf")
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus_texts[:400]), model_prefix=str(tmp_path / "spm"), vocab_size=1000,
        model_type="unigram", pad_id=0, pad_piece="[PAD]", bos_id=1, bos_piece="[CLS]", eos_id=2,
        eos_piece="[SEP]", unk_id=3, unk_piece="[UNK]", user_defined_symbols=["[MASK]"], minloglevel=2)
    (tmp_path / "spm.vocab").unlink()
    ours = bertkit.load_tokenizer(tmp_path / "spm.model")
    reference = transformers.DebertaV2TokenizerFast.from_pretrained(tmp_path)
    for text in HARD + SENTENCES:
        assert ours.encode(text) == reference.encode(text), repr(text)
    for a, b in PAIRS:
        assert ours.encode(a, b) == reference.encode(a, b)
        assert ours(a, [b])["token_type_ids"][0].tolist() == reference(a, b)["token_type_ids"]
    assert ours.mask_token_id == reference.mask_token_id and ours.vocab_size == len(reference)


@pytest.mark.parametrize("kind,lowercase", [("wordpiece", True), ("wordpiece", False), ("bpe", False),
                                            ("unigram", True), ("unigram", False)])
def test_trained_tokenizers_round_trip_through_transformers(kind, lowercase, corpus_texts, tmp_path):
    tok = train_tokenizer(corpus_texts[:300], TokenizerSettings(kind=kind, vocab_size=800, lowercase=lowercase))
    assert 700 <= tok.vocab_size <= 800
    assert tok.mask_token_id is not None and set(tok.special_ids) >= {tok.pad_token_id, tok.mask_token_id}
    text = "The Film was UNBELIEVABLY good, wasn't it?"
    ids = tok.encode(text)
    assert ids[0] == tok.frame.single[0][0] and ids[-1] == tok.frame.single[-1][0]
    assert (tok.encode("the film") == tok.encode("THE FILM")) == (lowercase and kind != "bpe")
    decoded = tok.decode(ids).replace(" ", "")
    expected = text.lower() if lowercase and kind != "bpe" else text
    assert decoded == expected.replace(" ", "")
    cls = {"wordpiece": "BertTokenizer", "bpe": "RobertaTokenizer", "unigram": "DebertaV2Tokenizer"}[kind]
    out = tmp_path / "not" / "there" / "yet"  # save makes the directory, as save_pretrained does
    tok.save(out, cls, 128)
    reloaded = bertkit.load_tokenizer(out)
    reference = transformers.AutoTokenizer.from_pretrained(out)
    for t in HARD[:20] + [text]:
        assert reloaded.encode(t) == tok.encode(t) == reference.encode(t), repr(t)
    if kind == "wordpiece":  # the vocab.txt alone, with the saved config's casing
        (out / "tokenizer.json").unlink()
        assert bertkit.load_tokenizer(out / "vocab.txt").encode(text) == ids


def test_continuation_table_marks_word_pieces(minilm_dir, roberta_files):
    tok = bertkit.load_tokenizer(minilm_dir)
    table = tok.continues_word()
    ids = tok.encode_plain(["unbelievably tokenization"])[0]
    pieces = [tok.id_to_token(i) for i in ids]
    assert [bool(table[i]) for i in ids] == [p.startswith("##") for p in pieces]
    assert not table[tok.special_ids].any()
    bpe = bertkit.load_tokenizer(roberta_files)
    ids = bpe.encode_plain(["hello unbelievably"])[0]
    starts = ~bpe.continues_word()[ids]
    starts[0] = True  # the first word has no space before it; the collator starts a word after a special
    assert starts.sum() == 2  # two words, whatever the pieces


def test_training_refuses_empty_corpus_and_bad_settings():
    with pytest.raises(bertkit.BertkitError, match="empty"):
        train_tokenizer(["", "   "], TokenizerSettings(kind="wordpiece", vocab_size=500))
    with pytest.raises(bertkit.BertkitError, match="unknown tokenizer kind"):
        TokenizerSettings(kind="char")


def test_vocabulary_larger_than_the_model_is_refused(minilm_dir):
    tok = bertkit.load_tokenizer(minilm_dir)
    check_vocab_fits(tok, 30522)
    with pytest.raises(bertkit.BertkitError, match="30522 tokens but the model's vocabulary has 1000"):
        check_vocab_fits(tok, 1000)
