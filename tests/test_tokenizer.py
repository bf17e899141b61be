"""Tokenizers against transformers: loading every file kind (MiniLM's real vocabulary over a
battery of hard text; RoBERTa vocab.json + merges.txt, DeBERTa-v3 spm.model and ALBERT
spiece.model built here),
training every kind, the special-token frame the data pipeline uses, bad files, and how the
transformers class the files name reads a tokenizer.json (DeBERTa v1's layout included)."""

import json
import shutil

import numpy as np
import pytest
import torch
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


def test_padding_and_truncation_sides_follow_tokenizer_config_and_are_saved(minilm_dir, tmp_path):
    # a model fine-tuned to keep a text's end says truncation_side "left"; both sides were ignored
    # (right padding, the start kept) and dropped when saved
    folder = tmp_path / "left"
    shutil.copytree(minilm_dir, folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, "padding_side": "left",
                                                              "truncation_side": "left", "model_max_length": 12}))
    texts, pairs = ["short", "a somewhat longer text than the other one, cut from its start"], ["x", "y z"]
    model = bertkit.from_pretrained(folder)
    model.save_pretrained(tmp_path / "saved")
    for source in (folder, tmp_path / "saved"):
        ours, reference = bertkit.load_tokenizer(source), transformers.AutoTokenizer.from_pretrained(source)
        assert (reference.padding_side, reference.truncation_side) == ("left", "left")
        for kw in (dict(padding=True), dict(padding=True, truncation=True),
                   dict(padding="max_length", truncation=True)):  # to model_max_length, as transformers pads
            for args in ((texts,), (texts, pairs)):
                got, want = ours(*args, **kw), reference(*args, return_tensors="pt", **kw)
                for key in ("input_ids", "attention_mask", "token_type_ids"):
                    assert torch.equal(got[key], want[key]), (kw, len(args), key)
    # and a classifier fine-tuned elsewhere is read as its tokenizer cuts (the text's end)
    from bertkit.tasks import classify

    head = bertkit.from_pretrained(folder)
    head = bertkit.Model(head.config.replace(num_labels=3), head="classification", tokenizer=head.tokenizer)
    head.save_pretrained(tmp_path / "classifier")
    reference = transformers.AutoModelForSequenceClassification.from_pretrained(tmp_path / "classifier").eval()
    with torch.no_grad():
        want = reference(**transformers.AutoTokenizer.from_pretrained(tmp_path / "classifier")(
            texts[1:], truncation=True, return_tensors="pt")).logits.softmax(-1)[0]
    [got] = classify(tmp_path / "classifier", texts[1:])
    assert list(got["scores"].values()) == pytest.approx(want.tolist(), abs=1e-5)


def test_bad_tokenizer_files_are_named(tmp_path):
    with pytest.raises(bertkit.BertkitError, match="no such file"):
        bertkit.load_tokenizer(tmp_path / "nope.json")
    with pytest.raises(bertkit.BertkitError, match="no tokenizer.json, vocab.txt, vocab.json, spm.model, spiece.model, sentencepiece.bpe.model in this directory"):
        bertkit.load_tokenizer(tmp_path)
    broken = tmp_path / "tokenizer.json"
    broken.write_text("{not json")
    with pytest.raises(bertkit.BertkitError, match="tokenizer.json: not a readable tokenizer.json"):
        bertkit.load_tokenizer(broken)
    broken.write_text('{"hello": 1}')  # JSON, but no tokenizer: said so, not as a syntax error
    with pytest.raises(bertkit.BertkitError, match='JSON without a tokenizer "model" \\(keys: hello\\)'):
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


def test_vocab_txt_lines_are_read_as_transformers_reads_them(minilm_dir, tmp_path):
    """A line's index is its id, trailing whitespace (a space, a tab, a Windows line end) is not
    part of the token, and a repeated token takes its last line, as `tokenizers` reads vocab.txt
    for transformers 5."""
    lines = (minilm_dir / "vocab.txt").read_text(encoding="utf-8").splitlines()
    at = {token: i for i, token in enumerate(lines)}
    lines[at["hello"]] += " "
    lines[at["world"]] += "\t"
    lines[at["film"] + 1] = "film"  # a repeat: replaces the token after it
    (tmp_path / "vocab.txt").write_bytes(("\r\n".join(lines) + "\r\n").encode())
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "BertTokenizer"}))
    ours, reference = bertkit.load_tokenizer(tmp_path), transformers.AutoTokenizer.from_pretrained(tmp_path)
    for text in ["hello world, a film", *HARD]:
        assert ours.encode(text) == reference.encode(text), repr(text)
    assert ours.encode("hello film")[1:-1] == [at["hello"], at["film"] + 1]


def test_saving_onto_a_file_is_one_error(minilm_dir, tmp_path):
    from bertkit.errors import BertkitError

    (tmp_path / "taken").write_text("keep me")
    with pytest.raises(BertkitError, match="taken: is a file, not a directory to save a tokenizer in"):
        bertkit.load_tokenizer(minilm_dir).save(tmp_path / "taken", "BertTokenizer", 128)
    assert (tmp_path / "taken").read_text() == "keep me"


@pytest.mark.parametrize("side", ["right", "left"])
def test_pad_to_multiple_of_and_lists_padded_to_max_length_as_transformers(minilm_dir, reference, side):
    """The call took no pad_to_multiple_of (a TypeError); lists padded to "max_length" padded every
    row to the longest row, where transformers pads each to max_length."""
    ours, theirs = bertkit.load_tokenizer(minilm_dir), transformers.AutoTokenizer.from_pretrained(minilm_dir)
    ours.padding_side = theirs.padding_side = side
    texts = ["one two three four five six seven eight nine", "a", "a b c"]
    for kw in (dict(pad_to_multiple_of=8), dict(padding="max_length", max_length=6),
               dict(padding="max_length", max_length=6, pad_to_multiple_of=4),
               dict(padding=True, pad_to_multiple_of=5)):
        got = ours(texts, return_tensors=None, truncation=False, **kw)  # (max_length alone truncates here)
        want = theirs(texts, **{"padding": True, **kw})
        assert {k: got[k] for k in want} == dict(want), kw
    got = ours(texts[1:], pad_to_multiple_of=8, return_offsets_mapping=True)
    want = theirs(texts[1:], padding=True, pad_to_multiple_of=8, return_offsets_mapping=True, return_tensors="pt")
    assert all(got[k].tolist() == want[k].tolist() for k in want)
    with pytest.raises(bertkit.BertkitError, match="pad_to_multiple_of must be a whole number of tokens, at least 1"):
        ours(texts, pad_to_multiple_of=0)
    # without padding the multiple is not used, rows of one length as tensors too (they were padded to 8)
    same = ["a b c", "d e f"]
    got = ours(same, padding=False, pad_to_multiple_of=8, return_tensors="pt")["input_ids"]
    assert got.tolist() == theirs(same, padding=False, pad_to_multiple_of=8, return_tensors="pt")["input_ids"].tolist()
    # truncation to a length the multiple does not divide: refused, as transformers refuses it (rows went past it)
    with pytest.raises(bertkit.BertkitError, match="truncation to max_length 6 and padding to a multiple of 4"):
        ours(texts, padding="max_length", max_length=6, truncation=True, pad_to_multiple_of=4)
    with pytest.raises(ValueError, match="not a multiple of pad_to_multiple_of"):
        theirs(texts, padding="max_length", max_length=6, truncation=True, pad_to_multiple_of=4)


def test_a_bare_tokenizer_json_pads_with_its_own_pad_token(tmp_path):
    """No tokenizer_config.json names the pad token: the vocabulary's <pad> pads, not id 0 (<s>)."""
    from tokenizers import ByteLevelBPETokenizer
    from tokenizers.processors import RobertaProcessing

    trained = ByteLevelBPETokenizer(add_prefix_space=True)
    trained.train_from_iterator(["the movie was great and the film was long"] * 50, vocab_size=300,
                                special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    trained.post_processor = RobertaProcessing(("</s>", 2), ("<s>", 0))
    trained.save(str(tmp_path / "tokenizer.json"))
    ours = bertkit.load_tokenizer(tmp_path / "tokenizer.json")
    assert ours.pad_token_id == trained.token_to_id("<pad>") != trained.token_to_id("<s>")
    batch = ours(["the movie", "the movie was great"])
    assert batch["input_ids"][0, -1].item() == trained.token_to_id("<pad>")


@pytest.mark.parametrize("fields", [{"max_len": 8}, {"model_max_length": 8.0, "max_len": 3},
                                    {"model_max_length": 1e30}])
def test_a_legacy_max_len_and_a_float_length_are_read_as_transformers_reads_them(minilm_dir, tmp_path, fields):
    """Files older than transformers 3 say max_len (transformers still reads it); a float length
    is a length, 1e30 is no limit. bertkit had no limit for the first two, and lost it on save."""
    shutil.copytree(minilm_dir, tmp_path / "a", ignore=shutil.ignore_patterns("*.safetensors", "*.bin", "*.onnx"))
    config = json.loads((tmp_path / "a" / "tokenizer_config.json").read_text())
    config.pop("model_max_length", None)
    (tmp_path / "a" / "tokenizer_config.json").write_text(json.dumps({**config, **fields}))
    ours, theirs = bertkit.load_tokenizer(tmp_path / "a"), transformers.AutoTokenizer.from_pretrained(tmp_path / "a")
    assert ours.model_max_length == theirs.model_max_length
    text = "one two three four five six seven eight nine"
    if theirs.model_max_length < 100 and isinstance(theirs.model_max_length, int):  # (a float fails there)
        assert ours(text, truncation=True)["input_ids"].tolist() == [theirs(text, truncation=True)["input_ids"]]
    ours.save_pretrained(tmp_path / "b")
    assert transformers.AutoTokenizer.from_pretrained(tmp_path / "b").model_max_length == theirs.model_max_length


def test_a_tokenizer_says_what_it_is(minilm_dir, reference, corpus_texts):
    shown = repr(bertkit.load_tokenizer(minilm_dir))  # it was <bertkit.data.tokenizer.Tokenizer object at 0x...>
    assert shown.startswith("Tokenizer(WordPiece, ") and f"{len(reference):,} tokens" in shown
    assert f"BertTokenizer, model_max_length {reference.model_max_length}, padding right" in shown
    trained = train_tokenizer(corpus_texts[:100], TokenizerSettings(kind="bpe", vocab_size=300))
    assert "trained by bertkit, model_max_length none" in repr(trained)


@pytest.mark.parametrize("kind", ["wordpiece", "bpe"])
def test_decode_cleans_up_tokenization_spaces_as_the_files_say(minilm_dir, roberta_files, tmp_path, kind):
    """Many folders saved by transformers 4 say clean_up_tokenization_spaces: true; transformers'
    decode (and so its fill-mask pipeline's sequence) then joins "it ' s" into "it's", except for
    BPE. bertkit ignored the setting."""
    source = minilm_dir if kind == "wordpiece" else roberta_files
    shutil.copytree(source, tmp_path / "a", ignore=shutil.ignore_patterns("*.safetensors", "*.bin", "*.onnx"))
    path = tmp_path / "a" / "tokenizer_config.json"
    config = json.loads(path.read_text()) if path.exists() else {"tokenizer_class": "RobertaTokenizer"}
    path.write_text(json.dumps({**config, "clean_up_tokenization_spaces": True}))
    ours, theirs = bertkit.load_tokenizer(tmp_path / "a"), transformers.AutoTokenizer.from_pretrained(tmp_path / "a")
    text = "Hello , world ! it 's a test . I can 't go ?"
    ids = theirs([text, "one ' two"])["input_ids"]
    for told in (None, True, False):
        assert ours.batch_decode(ids, clean_up_tokenization_spaces=told) == theirs.batch_decode(
            ids, clean_up_tokenization_spaces=told), told
        assert ours.decode(ids[0], True, told) == theirs.decode(ids[0], True, clean_up_tokenization_spaces=told), told
    ours.save_pretrained(tmp_path / "b")
    assert transformers.AutoTokenizer.from_pretrained(tmp_path / "b").clean_up_tokenization_spaces is True


@pytest.mark.parametrize("key", ["padding_side", "truncation_side"])
def test_a_side_that_is_neither_left_nor_right_is_refused_at_load_naming_the_file(minilm_dir, tmp_path, key):
    """transformers refuses it at load; bertkit refused it at the first call, without the folder."""
    shutil.copytree(minilm_dir, tmp_path / "a", ignore=shutil.ignore_patterns("*.safetensors", "*.bin", "*.onnx"))
    config = json.loads((tmp_path / "a" / "tokenizer_config.json").read_text())
    (tmp_path / "a" / "tokenizer_config.json").write_text(json.dumps({**config, key: "LEFT"}))
    said = rf"a/tokenizer_config.json: {key} must be 'left' or 'right', got 'LEFT'"
    with pytest.raises(bertkit.BertkitError, match=said):
        bertkit.load_tokenizer(tmp_path / "a")


@pytest.mark.parametrize("extra", [["[CLS]"], [], {}])
def test_additional_special_tokens_count_only_where_extra_special_tokens_list_none(minilm_dir, tmp_path, extra):
    """transformers 5 reads the older additional_special_tokens only when extra_special_tokens is
    empty or missing (a folder it saved lists the named tokens there, then edited); bertkit added
    both lists, so "[E1]" became a new token that transformers splits."""
    shutil.copytree(minilm_dir, tmp_path / "a", ignore=shutil.ignore_patterns("*.safetensors", "*.bin", "*.onnx"))
    config = json.loads((tmp_path / "a" / "tokenizer_config.json").read_text())
    fields = {"extra_special_tokens": extra, "additional_special_tokens": ["[E1]"]}
    (tmp_path / "a" / "tokenizer_config.json").write_text(json.dumps({**config, **fields}))
    ours, theirs = bertkit.load_tokenizer(tmp_path / "a"), transformers.AutoTokenizer.from_pretrained(tmp_path / "a")
    assert len(ours) == len(theirs) and ours.encode("x [E1] y") == theirs.encode("x [E1] y")
    assert ours.all_special_tokens == theirs.all_special_tokens


@pytest.mark.parametrize("value", ["512", 0, 12.5, True])
def test_a_model_max_length_that_is_no_length_is_one_error_naming_the_file(minilm_dir, tmp_path, value):
    shutil.copytree(minilm_dir, tmp_path / "a", ignore=shutil.ignore_patterns("*.safetensors", "*.bin", "*.onnx"))
    config = json.loads((tmp_path / "a" / "tokenizer_config.json").read_text())
    (tmp_path / "a" / "tokenizer_config.json").write_text(json.dumps({**config, "model_max_length": value}))
    with pytest.raises(bertkit.BertkitError, match=r"tokenizer_config.json: model_max_length must be a whole number"):
        bertkit.load_tokenizer(tmp_path / "a")


@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_a_pad_token_set_to_null_stays_unnamed(minilm_dir, tmp_path, family):
    """tokenizer_config.json's pad_token: null names no pad token, as in transformers: neither the
    class's default ([PAD] of BertTokenizer) nor a <pad> appended to a RoBERTa vocabulary without one
    (which made len() one more than the model's table). Saved, it stays null."""
    from tokenizers import ByteLevelBPETokenizer
    from tokenizers.processors import RobertaProcessing

    folder = tmp_path / "tok"
    if family == "bert":
        shutil.copytree(minilm_dir, folder, ignore=shutil.ignore_patterns("special_tokens_map.json", "*.safetensors"))
    else:
        trained = ByteLevelBPETokenizer()
        trained.train_from_iterator(["the movie was great and the film was long"] * 50, vocab_size=300,
                                    special_tokens=["<s>", "</s>", "<unk>", "<mask>"])
        trained.post_processor = RobertaProcessing(("</s>", 1), ("<s>", 0))
        transformers.RobertaTokenizerFast(tokenizer_object=trained, mask_token="<mask>").save_pretrained(folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, "pad_token": None}))
    (folder / "special_tokens_map.json").unlink(missing_ok=True)
    for round_trip in ("loaded", "saved"):
        ours, reference = bertkit.load_tokenizer(folder), transformers.AutoTokenizer.from_pretrained(folder)
        if family == "bert" and round_trip == "loaded":  # (an unknown token set to null: it was an error)
            config = json.loads((folder / "tokenizer_config.json").read_text())
            (tmp_path / "unk").mkdir(exist_ok=True)
            shutil.copytree(folder, tmp_path / "unk", dirs_exist_ok=True)
            (tmp_path / "unk" / "tokenizer_config.json").write_text(json.dumps({**config, "unk_token": None}))
            unnamed = bertkit.load_tokenizer(tmp_path / "unk")
            theirs = transformers.AutoTokenizer.from_pretrained(tmp_path / "unk")
            assert unnamed.unk_token is theirs.unk_token is None and unnamed.encode("a text") == theirs.encode("a text")
        assert (ours.pad_token, len(ours)) == (reference.pad_token, len(reference)), round_trip
        assert ours.pad_token is None, round_trip
        assert ours("the movie")["input_ids"].tolist() == [reference("the movie")["input_ids"]]
        assert ours(["the", "the movie was"])["attention_mask"][0].tolist() == [1, 1, 1, 0, 0]  # (still pads)
        ours.save_pretrained(folder := tmp_path / "saved")


def test_extra_special_tokens_stay_special_after_a_save(minilm_dir, tmp_path):
    """Special tokens beyond the named ones are written back where transformers lists them, so
    its special-token mask (what its MLM collator leaves unmasked) is the same after a save."""
    source = transformers.AutoTokenizer.from_pretrained(minilm_dir)
    source.add_special_tokens({"additional_special_tokens": ["<ent>", "<sp2>"]})
    source.save_pretrained(tmp_path / "src")
    bertkit.load_tokenizer(tmp_path / "src").save(tmp_path / "out", "BertTokenizer", 128)
    saved = transformers.AutoTokenizer.from_pretrained(tmp_path / "out")
    assert saved.all_special_tokens == source.all_special_tokens
    ids = source.encode("a <ent> b <sp2>")
    assert saved.get_special_tokens_mask(ids, already_has_special_tokens=True) == \
        source.get_special_tokens_mask(ids, already_has_special_tokens=True)


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


def test_vocab_txt_lines_are_read_as_tokenizers_reads_them(tmp_path):
    # a token's id is its line's index, lines end at "\n" alone, and only Unicode white space
    # ends a token: a lone \r made two lines and shifted every later id; \x1c is part of a token
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "x\ry", "a\x1c", "b\u00a0", "c", "d\x85", "e",
              "f\u2028g", "h"]
    (tmp_path / "vocab.txt").write_text("\n".join(tokens) + "\n", newline="")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "BertTokenizer",
                                                                "do_lower_case": False}))
    ours, reference = bertkit.load_tokenizer(tmp_path), transformers.AutoTokenizer.from_pretrained(tmp_path)
    assert len(ours) == len(reference) == 13
    for text in ("c e h", "a b d", "x y", "b c"):
        assert ours.encode(text) == reference.encode(text), text


def test_a_saved_roberta_tokenizer_cuts_to_the_length_the_model_takes(roberta_files, corpus_texts, tmp_path):
    # RoBERTa's positions start after the padding id: 66 positions take 64 tokens, and a tokenizer
    # saved with model_max_length 66 gave transformers' model an index error at position 66
    tokenizer = bertkit.load_tokenizer(roberta_files)
    model = bertkit.build("roberta-base", hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64,
                          max_positions=66, vocab_size=len(tokenizer))
    model.tokenizer = tokenizer
    model.save_pretrained(tmp_path)
    reference = transformers.AutoTokenizer.from_pretrained(tmp_path)
    assert reference.model_max_length == model.backbone.embeddings.max_length == 64
    long = reference(" ".join(corpus_texts[:20]), truncation=True, return_tensors="pt")
    assert long["input_ids"].shape[1] == 64
    transformers.AutoModel.from_pretrained(tmp_path)(**long)  # runs: every position is in the table


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
    assert ours.mask_token_id == reference.mask_token_id and len(ours) == len(reference)
    # a save writes spm.model back, as transformers' save copies its vocab_file: the saved folder
    # without its tokenizer.json still gives transformers the same tokenizer
    ours.save(tmp_path / "saved", "DebertaV2Tokenizer", 512)
    (tmp_path / "saved" / "tokenizer.json").unlink()
    again = transformers.DebertaV2TokenizerFast.from_pretrained(tmp_path / "saved")
    assert all(again.encode(text) == reference.encode(text) for text in HARD + SENTENCES)


def test_tokenizer_settings_say_what_training_does():
    """Byte-level BPE cannot lowercase: asked to, it is refused, and its settings say cased; every
    family that `bertkit models` lists has a recipe."""
    from bertkit.data.trainers import FAMILY_KIND
    from bertkit.errors import BertkitError

    with pytest.raises(BertkitError, match="byte-level BPE reads bytes as they are and cannot lowercase"):
        TokenizerSettings.for_family("roberta", lowercase=True)
    assert TokenizerSettings.for_family("roberta").lowercase is False
    assert TokenizerSettings.for_family("bert").lowercase is True
    assert TokenizerSettings.for_family("deberta-v3").lowercase is False  # its released spm.model is cased
    assert TokenizerSettings.for_family("albert").lowercase is True
    assert {p.config.family for p in map(bertkit.config.get_preset, bertkit.list_models())} <= set(FAMILY_KIND)


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
    decoded = tok.decode(ids, skip_special_tokens=True).replace(" ", "")
    expected = text.lower() if lowercase and kind != "bpe" else text
    assert decoded == expected.replace(" ", "")
    cls = {"wordpiece": "BertTokenizer", "bpe": "RobertaTokenizer", "unigram": "DebertaV2Tokenizer"}[kind]
    out = tmp_path / "not" / "there" / "yet"  # save makes the directory, as save_pretrained does
    tok.save(out, cls, 128)
    reloaded = bertkit.load_tokenizer(out)
    reference = transformers.AutoTokenizer.from_pretrained(out)
    for t in HARD[:20] + [text]:
        assert reloaded.encode(t) == tok.encode(t) == reference.encode(t), repr(t)
    # A fill-mask query reads as pre-training masks a word: the mask where the word's token was
    # (byte-level BPE's mask takes the space before it, as "Ġwas" holds its space).
    plain = tok.encode("the film was good")
    was = next(i for i, t in enumerate(plain) if tok.id_to_token(t).strip("Ġ▁") == "was")
    query = f"the film {tok.mask_token} good"
    assert tok.encode(query) == reloaded.encode(query) == reference.encode(query) == \
        plain[:was] + [tok.mask_token_id] + plain[was + 1:]
    if kind == "wordpiece":  # the vocab.txt alone, with the saved config's casing
        (out / "tokenizer.json").unlink()
        assert bertkit.load_tokenizer(out / "vocab.txt").encode(text) == ids


@pytest.mark.parametrize("family, model_type", [("albert", "albert"), ("bert", "bert"), ("deberta-v3", "deberta-v2"),
                                               ("roberta", "roberta")])
def test_a_trained_tokenizer_gives_transformers_the_pairs_segments(family, model_type, corpus_texts, tmp_path):
    # what `bertkit pretrain` saves: transformers' generic class and (v5) AlbertTokenizer return no
    # token_type_ids unless the saved config lists them: a pair's second text reached the model as segment 0
    from bertkit.interop.hf_names import FAMILIES

    tok = train_tokenizer(corpus_texts[:300], TokenizerSettings.for_family(family, vocab_size=800))
    tok.save(tmp_path, FAMILIES[model_type].tokenizer_class, 128)
    reference = transformers.AutoTokenizer.from_pretrained(tmp_path)
    pair = reference("the film", "was good")
    ours = tok(["the film"], ["was good"])
    assert pair["input_ids"] == ours["input_ids"][0].tolist()
    assert pair.get("token_type_ids", [0] * len(pair["input_ids"])) == ours["token_type_ids"][0].tolist()


def test_a_wordpiece_vocabulary_trained_twice_is_the_same(corpus_texts):
    # The trainer orders its alphabet and tied pieces by hash, differently on every run; the ids
    # must not follow (a run's tokenizer is cached, but a fresh cache or machine trains it again).
    settings = TokenizerSettings(kind="wordpiece", vocab_size=800)
    first, second = (train_tokenizer(corpus_texts[:300], settings).backend.get_vocab() for _ in range(2))
    assert first == second


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


@pytest.mark.parametrize("kind", ["metaspace-bpe", "word-end-bpe", "normalizer-unigram"])
def test_word_starts_come_from_the_pre_tokenizer_not_the_model_kind(corpus_texts, kind):
    # A SentencePiece BPE in tokenizer.json form marks word starts with "▁", not "Ġ": whole-word
    # masking read every "▁word" as continuing a word and masked 30 of 30 tokens in every row.
    from tokenizers import Tokenizer as Backend, models, normalizers, pre_tokenizers, trainers

    from bertkit.data.tokenizer import Tokenizer

    if kind == "normalizer-unigram":  # "▁" put in by the normalizer, no pre-tokenizer (Llama-style files)
        backend = Backend(models.Unigram())
        backend.pre_tokenizer = pre_tokenizers.Metaspace()  # trained on words, then converted
        backend.train_from_iterator(corpus_texts[:300], trainers.UnigramTrainer(
            vocab_size=600, special_tokens=["<unk>", "<s>"], unk_token="<unk>"))
        backend.pre_tokenizer = None
        backend.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
        tok = Tokenizer(backend, {"unk_token": "<unk>", "cls_token": "<s>"})
        ids = tok.encode_plain(["the unbelievably tokenized sentence"])[0]
        assert (~tok.continues_word()[ids]).sum() == 4
        return
    metaspace = kind == "metaspace-bpe"
    suffix = {} if metaspace else {"end_of_word_suffix": "</w>"}
    backend = Backend(models.BPE(unk_token="<unk>", **suffix))
    backend.pre_tokenizer = pre_tokenizers.Metaspace() if metaspace else pre_tokenizers.Whitespace()
    backend.train_from_iterator(corpus_texts[:300], trainers.BpeTrainer(
        vocab_size=600, special_tokens=["<unk>", "<s>"], **suffix))
    tok = Tokenizer(backend, {"unk_token": "<unk>", "cls_token": "<s>"})
    if not metaspace:  # "</w>" ends a word: which token starts one depends on the token before
        with pytest.raises(bertkit.BertkitError, match="whole-word masking cannot find words"):
            tok.continues_word()
        return
    ids = tok.encode_plain(["the unbelievably tokenized sentence"])[0]
    assert len(ids) > 4  # some word is split into pieces
    assert (~tok.continues_word()[ids]).sum() == 4  # four words start, whatever the pieces


def test_training_refuses_empty_corpus_and_bad_settings():
    for kind in ("wordpiece", "bpe", "unigram"):  # byte-level BPE gave its 261 bytes and specials
        with pytest.raises(bertkit.BertkitError, match="the corpus is empty"):
            train_tokenizer(["", "   "], TokenizerSettings(kind=kind, vocab_size=500))
    with pytest.raises(bertkit.BertkitError, match="unknown tokenizer kind"):
        TokenizerSettings(kind="char")
    # wrong types were raw TypeErrors deep in training, or (lowercase="no") read as true
    for field, value, words in [("vocab_size", 1000.5, "must be an integer"),
                                ("vocab_size", "1000", "must be an integer"),
                                ("lowercase", "no", "must be true or false"),
                                ("min_frequency", -1, "must be at least 0")]:
        with pytest.raises(bertkit.BertkitError, match=f"{field} {words}"):
            TokenizerSettings(**{field: value})
    with pytest.raises(bertkit.BertkitError, match="family 'albert' has no wordpiece recipe"):
        TokenizerSettings(kind="wordpiece", family="albert")


def test_pipeline_settings_refuse_wrong_types_by_name():
    from bertkit.data import PipelineSettings
    from bertkit.data.cache import CacheSettings

    # accepted, they crashed later ('dict' object has no attribute 'whole_word')
    for kw, words in [({"max_length": "64"}, "max_length must be an integer"),
                      ({"masking": {"rate": 0.2}}, "masking must be a MaskingSettings"),
                      ({"cache": {}}, "cache must be a CacheSettings")]:
        with pytest.raises(bertkit.BertkitError, match=f"PipelineSettings: {words}"):
            PipelineSettings(**kw)
    with pytest.raises(bertkit.BertkitError, match="CacheSettings: chunk_documents must be an integer"):
        CacheSettings(chunk_documents=2.5)
    from bertkit.data.builders import ExampleSettings
    from bertkit.data.collators import MaskingSettings
    from bertkit.numpy_ref import TrainSettings as NumpySettings
    from bertkit.train import TrainSettings

    for made, words in [(lambda: MaskingSettings(rate="0.15"), "MaskingSettings: rate must be a number"),
                        (lambda: ExampleSettings(max_length=2.5), "ExampleSettings: max_length must be an integer"),
                        (lambda: TrainSettings(steps="3"), "TrainSettings: steps must be an integer"),
                        (lambda: NumpySettings(lr="1e-3"), "TrainSettings: lr must be a number")]:
        with pytest.raises(bertkit.BertkitError, match=words):
            made()


@pytest.mark.parametrize("family", ["albert", "deberta-v3"])
def test_unigram_refuses_a_corpus_with_more_characters_than_the_vocabulary(family):
    # tokenizers' Unigram trainer keeps every character: it raised a bare Exception, or (just
    # above the count) gave more tokens than asked
    import re

    text = ["".join(chr(0x4E00 + i) for i in range(400))]
    with pytest.raises(bertkit.BertkitError, match="distinct characters") as caught:
        train_tokenizer(text, TokenizerSettings.for_family(family, vocab_size=300))
    need = int(re.search(r"vocab_size must be at least ([\d,]+)", str(caught.value)).group(1).replace(",", ""))
    assert need > 400
    with pytest.raises(bertkit.BertkitError, match=f"at least {need:,}, not {need - 1:,}"):
        train_tokenizer(text, TokenizerSettings.for_family(family, vocab_size=need - 1))
    assert train_tokenizer(text, TokenizerSettings.for_family(family, vocab_size=need)).vocab_size == need


@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_a_trained_vocabulary_never_exceeds_the_size_asked(family, corpus_texts):
    # WordPiece kept every distinct character: 500 asked on CJK text gave thousands, which the
    # model built for 500 then refused
    rng = np.random.default_rng(0)
    cjk = ["".join(chr(0x4E00 + int(i)) for i in rng.integers(0, 3000, 200)) for _ in range(40)]
    texts = cjk + corpus_texts[:100]
    settings = TokenizerSettings.for_family(family, vocab_size=500)
    first, second = (train_tokenizer(texts, settings) for _ in range(2))
    assert first.vocab_size <= 500
    assert len({c for t in texts for c in t}) > 500  # (the corpus alone would not fit)
    assert first.encode("the film was good") == second.encode("the film was good")
    # the characters kept are the same on every training (the trainer's own cut breaks ties by hash)
    letters = {t for t in first.backend.get_vocab() if len(t) == 1}
    assert letters == {t for t in second.backend.get_vocab() if len(t) == 1}


def test_a_trained_albert_tokenizer_is_albert_s_for_transformers(corpus_texts, tmp_path):
    # it had DeBERTa-v3's specials ([SEP]=2, [UNK]=3, which AlbertConfig's bos/eos ids name) and was
    # saved as the generic class
    tok = train_tokenizer(corpus_texts[:100], TokenizerSettings.for_family("albert", vocab_size=500))
    tok.save(tmp_path, "AlbertTokenizer", 128)
    assert json.loads((tmp_path / "tokenizer_config.json").read_text())["tokenizer_class"] == "AlbertTokenizer"
    reference = transformers.AutoTokenizer.from_pretrained(tmp_path)
    assert type(reference).__name__.startswith("AlbertTokenizer")
    for t in HARD + ["Café CRÈME naïve résumé"]:
        assert tok.encode(t) == reference.encode(t), repr(t)
    config = transformers.AlbertConfig()
    assert reference.convert_ids_to_tokens([config.bos_token_id, config.eos_token_id]) == \
        [tok.special_tokens["cls_token"], tok.special_tokens["sep_token"]]
    assert reference.unk_token_id == tok.unk_token_id and reference.pad_token_id == tok.pad_token_id
    # released ALBERT drops accents; DeBERTa-v3 keeps its own order and casing
    assert tok.encode("café") == tok.encode("cafe")
    deberta = train_tokenizer(corpus_texts[:30], TokenizerSettings.for_family("deberta-v3", vocab_size=300))
    assert deberta.id_to_token(deberta.pad_token_id) == "[PAD]" and deberta.cls_token_id != config.bos_token_id


def test_vocabulary_larger_than_the_model_is_refused(minilm_dir):
    tok = bertkit.load_tokenizer(minilm_dir)
    check_vocab_fits(tok, 30522)
    with pytest.raises(bertkit.BertkitError, match="30522 tokens but the model's vocabulary has 1000"):
        check_vocab_fits(tok, 1000)
    check_vocab_fits(tok, 30522, 2)
    check_vocab_fits(tok, 30522, 0)  # a model without token types (DeBERTa-v3, ModernBERT) reads none
    with pytest.raises(bertkit.BertkitError, match="a text pair 2 segment ids but the model embeds 1 token type"):
        check_vocab_fits(tok, 30522, 1)  # BERT's tokenizer beside RoBERTa's single token type


# ---- ALBERT's spiece.model ----------------------------------------------------------------------
ALBERT_TEXT = [
    "café naïve résumé CRÈME brûlée", "``quoted'' and \"straight\" quotes, ``unclosed", "double  spaces   and\ttabs\nnewlines",
    "Hello[MASK]world and a [MASK] inside text", "[CLS] [SEP] <pad> <unk> typed by a user", "numbers 1,000 9, 3,5 and 42,",
    "UPPER lower MiXeD", "東京 中文 🙂👍🏽", "(parens) - dash – en-dash £5 €10.", "trailing space ",
]


@pytest.fixture(scope="module")
def albert_spiece(tmp_path_factory, corpus_texts):
    """A spiece.model laid out like albert-base-v2's: <pad> <unk> [CLS] [SEP] [MASK] at ids 0-4
    ([CLS] [SEP] [MASK] as control pieces), a few user-defined punctuation pieces after them, and
    SentencePiece's default nmt_nfkc normalization rules compiled into the file."""
    spm = pytest.importorskip("sentencepiece")
    pytest.importorskip("google.protobuf")
    directory = tmp_path_factory.mktemp("albert")
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus_texts[:400]), model_prefix=str(directory / "spiece"), vocab_size=1000,
        model_type="unigram", pad_id=0, pad_piece="<pad>", unk_id=1, unk_piece="<unk>", bos_id=-1, eos_id=-1,
        control_symbols=["[CLS]", "[SEP]", "[MASK]"], user_defined_symbols=["(", ")", '"', "-", ".", "–", "£", "€"],
        minloglevel=2)
    (directory / "spiece.vocab").unlink()
    return directory / "spiece.model"


def _albert_dir(folder, spiece, **config):
    """A checkpoint folder holding only spiece.model and a tokenizer_config.json: what
    transformers' AutoTokenizer needs to pick AlbertTokenizer."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(spiece, folder / "spiece.model")
    (folder / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "AlbertTokenizer", **config}))
    return folder


def _assert_same_ids(ours, reference, texts):
    for text in texts:
        assert ours.encode(text) == reference.encode(text), repr(text)
    for a, b in [*PAIRS, *zip(texts, reversed(texts))]:
        assert ours.encode(a, b) == reference.encode(a, b), (a, b)
        # AlbertTokenizer returns token types only when asked (not in its model_input_names); a
        # batch keeps an empty second text as a pair, as our batch call does
        expected = reference([a], [b], return_token_type_ids=True)["token_type_ids"][0]
        assert ours(a, [b], return_token_type_ids=True)["token_type_ids"][0].tolist() == expected, (a, b)
        if ours.tokenizer_class is not None:  # (a bare file names no class: bertkit returns all three)
            assert set(ours(a, [b])) == set(reference([a], [b])), (a, b)


def test_albert_spiece_model_equals_transformers(albert_spiece, tmp_path):
    """The bare file, read by name with ALBERT's defaults (uncased, accents dropped, `` '' -> "),
    and its folder give AlbertTokenizer's ids (AutoTokenizer picks the same class; in transformers
    v5 AlbertTokenizerFast is AlbertTokenizer)."""
    folder = _albert_dir(tmp_path, albert_spiece)
    reference = transformers.AutoTokenizer.from_pretrained(folder)
    assert type(reference) is transformers.AlbertTokenizer is transformers.AlbertTokenizerFast
    bare = bertkit.load_tokenizer(albert_spiece)  # no tokenizer_config.json beside this one
    _assert_same_ids(bare, reference, ALBERT_TEXT + HARD + SENTENCES)
    _assert_same_ids(bertkit.load_tokenizer(folder), reference, ALBERT_TEXT)
    assert bare.encode("Café") == bare.encode("cafe")
    assert bare.id_to_token(bare.encode("``x''")[2]) == '"'  # the user-defined '"' piece, from ``
    assert [bare.mask_token_id, bare.pad_token_id, len(bare)] == [4, 0, len(reference)]
    assert bare.mask_token_id == reference.mask_token_id and bare.pad_token_id == reference.pad_token_id
    assert bare.frame.single[0] == (2, 0) and bare.frame.pair[-1] == (3, 1)


@pytest.mark.parametrize("config", [{"keep_accents": True}, {"do_lower_case": False},
                                    {"keep_accents": True, "do_lower_case": False, "remove_space": False}])
def test_albert_spiece_follows_tokenizer_config(albert_spiece, tmp_path, config):
    folder = _albert_dir(tmp_path, albert_spiece, **config)
    reference = transformers.AutoTokenizer.from_pretrained(folder)
    ours = bertkit.load_tokenizer(folder / "spiece.model")
    _assert_same_ids(ours, reference, ALBERT_TEXT + HARD[:20])
    default = bertkit.load_tokenizer(albert_spiece)
    changed = "Café naïve" if config.get("keep_accents") else "Hello World"
    assert ours.encode(changed) != default.encode(changed)


def test_albert_tokenizer_saved_by_bertkit_loads_in_transformers(albert_spiece, tmp_path):
    """bertkit writes tokenizer.json + tokenizer_config.json (class AlbertTokenizer, as ALBERT
    checkpoints do); transformers rebuilds ALBERT's normalizer from that config, so the flags
    read from the original config must be written back."""
    ours = bertkit.load_tokenizer(_albert_dir(tmp_path / "a", albert_spiece, keep_accents=True))
    ours.save(tmp_path / "b", "AlbertTokenizer", 512)
    reference = transformers.AutoTokenizer.from_pretrained(tmp_path / "b")
    reloaded = bertkit.load_tokenizer(tmp_path / "b")
    for text in ALBERT_TEXT + HARD[:20]:
        assert reloaded.encode(text) == ours.encode(text) == reference.encode(text), repr(text)
    saved = json.loads((tmp_path / "b" / "tokenizer_config.json").read_text())
    assert (saved["tokenizer_class"], saved["keep_accents"], saved["do_lower_case"]) == ("AlbertTokenizer", True, True)


@pytest.mark.parametrize("lowercase", [True, False])
def test_trained_unigram_saved_for_albert_loads_the_same_in_transformers(corpus_texts, tmp_path, lowercase):
    """bertkit trains ALBERT's tokenizer with the DeBERTa-style Unigram pipeline; declared
    AlbertTokenizer, transformers would rebuild ALBERT's normalizer around its vocabulary (accents
    dropped, lowercased by default) and give other ids, so it is declared generic instead."""
    tok = train_tokenizer(corpus_texts[:300], TokenizerSettings(kind="unigram", vocab_size=800, lowercase=lowercase))
    tok.save(tmp_path, "AlbertTokenizer", 128)
    reference = transformers.AutoTokenizer.from_pretrained(tmp_path)
    for text in ALBERT_TEXT + HARD:
        assert tok.encode(text) == reference.encode(text), repr(text)


def test_albert_spiece_file_choice_and_refusals(albert_spiece, minilm_dir, tmp_path, corpus_texts):
    spm = pytest.importorskip("sentencepiece")
    folder = _albert_dir(tmp_path, albert_spiece)
    shutil.copy(minilm_dir / "tokenizer.json", folder)  # a fast file wins over the slow one
    with pytest.warns(UserWarning, match="the files name AlbertTokenizer, a Unigram tokenizer, but this file holds"):
        assert bertkit.load_tokenizer(folder).encode("hello") == bertkit.load_tokenizer(minilm_dir).encode("hello")
    (folder / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "T5Tokenizer"}))
    with pytest.raises(bertkit.BertkitError, match="tokenizer_config.json: tokenizer_class 'T5Tokenizer' is not"):
        bertkit.load_tokenizer(folder / "spiece.model")
    bpe = tmp_path / "bpe"
    bpe.mkdir()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(corpus_texts[:100]), model_prefix=str(bpe / "spiece"),
                                   vocab_size=400, model_type="bpe", minloglevel=2)
    with pytest.raises(bertkit.BertkitError, match="spiece.model: a SentencePiece bpe model; only Unigram"):
        bertkit.load_tokenizer(bpe)


# ---- tokens that tokenizer_config.json adds or re-flags ----------------------------------------------
NEW_TOKENS_TEXT = ["a [NEW] b [new] <extra_1> tok", "Hello [MASK] world", "Hello <mask> world", "x[NEW]y", "plain text"]


@pytest.mark.parametrize("config", [
    {"added_tokens_decoder": {"30522": {"content": "[NEW]", "lstrip": False, "rstrip": False, "normalized": False,
                                        "single_word": False, "special": True},
                              "30523": {"content": "<extra_1>", "normalized": True, "special": False}}},
    {"additional_special_tokens": ["[NEW]"]},
    {"extra_special_tokens": ["[NEW]", "<extra_1>"]},
    {"mask_token": {"__type": "AddedToken", "content": "[MASK]", "lstrip": True, "rstrip": False,
                    "normalized": False, "single_word": False, "special": True}},
], ids=["added_tokens_decoder", "additional_special_tokens", "extra_special_tokens", "mask_as_dict"])
def test_vocab_txt_takes_tokens_from_tokenizer_config(minilm_dir, tmp_path, config):
    """Tokens added after training (added_tokens_decoder, the special-token lists) and a named token
    written as an AddedToken dict (as transformers 4.x saved them) reach the vocab.txt pipeline."""
    shutil.copy(minilm_dir / "vocab.txt", tmp_path)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "BertTokenizer", **config}))
    ours = bertkit.load_tokenizer(tmp_path / "vocab.txt")
    reference = transformers.AutoTokenizer.from_pretrained(tmp_path)
    for text in NEW_TOKENS_TEXT + HARD[:10]:
        assert ours.encode(text) == reference.encode(text), repr(text)
    assert len(ours) == len(reference) and ours.mask_token == "[MASK]"


def test_roberta_mask_written_as_added_token_dict_keeps_lstrip(roberta_files, tmp_path):
    """RoBERTa checkpoints saved by transformers 4.x write <mask> as a dict with lstrip true: the
    space before it belongs to the mask (no "Ġ" token), which changes the ids around every mask."""
    for name in ("vocab.json", "merges.txt"):
        shutil.copy(roberta_files / name, tmp_path)
    mask = {"__type": "AddedToken", "content": "<mask>", "lstrip": True, "rstrip": False, "normalized": False,
            "single_word": False, "special": True}
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "RobertaTokenizer", "mask_token": mask}))
    ours = bertkit.load_tokenizer(tmp_path / "vocab.json")
    reference = transformers.AutoTokenizer.from_pretrained(tmp_path)
    for text in NEW_TOKENS_TEXT + HARD[:10]:
        assert ours.encode(text) == reference.encode(text), repr(text)
    assert ours.mask_token == "<mask>" and ours.encode("a <mask>") != bertkit.load_tokenizer(roberta_files).encode("a <mask>")


def test_spiece_added_tokens_decoder_and_bad_ids(albert_spiece, tmp_path):
    table = {"4": {"content": "[MASK]", "lstrip": True, "normalized": False, "special": True},
             "1000": {"content": "[NEW]", "normalized": False, "special": True}}
    folder = _albert_dir(tmp_path / "ok", albert_spiece, added_tokens_decoder=table)
    ours = bertkit.load_tokenizer(folder)
    reference = transformers.AutoTokenizer.from_pretrained(folder)
    for text in NEW_TOKENS_TEXT + ALBERT_TEXT:
        assert ours.encode(text) == reference.encode(text), repr(text)
    bad = _albert_dir(tmp_path / "bad", albert_spiece, added_tokens_decoder={"1005": {"content": "[NEW]"}})
    with pytest.raises(bertkit.BertkitError, match=r"tokenizer_config.json: added_tokens_decoder puts '\[NEW\]' at id 1005"):
        bertkit.load_tokenizer(bad)


# ---- the transformers class decides how the files are read --------------------------------------------
DROP = object()  # a CLASS_CASES change that removes the key
# name -> (saved tokenizer to start from, tokenizer_config.json changes, config.json model_type, tokenizer.json edit)
CLASS_CASES = {
    "bert-cased-config-over-uncased-json": ("wordpiece-uncased", {"do_lower_case": False}, None, None),
    "bert-strip-accents-false": ("wordpiece-uncased", {"strip_accents": False}, None, None),
    "bert-no-chinese-split": ("wordpiece-uncased", {"tokenize_chinese_chars": False}, None, None),
    "bert-uncased-config-over-cased-json": ("wordpiece-cased", {"do_lower_case": True}, None, None),
    "bert-without-do-lower-case": ("wordpiece-cased", {"do_lower_case": DROP}, None, None),
    "distilbert-without-do-lower-case": ("wordpiece-cased", {"tokenizer_class": "DistilBertTokenizerFast",
                                                             "do_lower_case": DROP}, None, None),
    "electra-model-type-only": ("wordpiece-cased", {"tokenizer_class": DROP, "do_lower_case": DROP}, "electra", None),
    "generic-class-reads-json-as-is": ("wordpiece-uncased", {"tokenizer_class": "PreTrainedTokenizerFast",
                                                             "do_lower_case": False}, "bert", None),
    "modernbert-reads-json-as-is": ("wordpiece-uncased", {"do_lower_case": False}, "modernbert", None),
    "roberta-add-prefix-space": ("bpe", {"add_prefix_space": True}, None, None),
    "roberta-model-type-only": ("bpe", {"tokenizer_class": DROP, "add_prefix_space": True}, "roberta", None),
    "deberta-v2-lowercase": ("unigram-cased", {"do_lower_case": True}, None, None),
    "deberta-v2-split-by-punct": ("unigram-cased", {"split_by_punct": True}, None, None),
    "deberta-v2-no-prefix-space": ("unigram-cased", {"add_prefix_space": False}, None, None),
    "deberta-v2-cased-config-over-uncased-json": ("unigram-uncased", {"do_lower_case": False}, None, None),
    "deberta-v2-without-do-lower-case": ("unigram-uncased", {"do_lower_case": DROP}, None, None),
    "deberta-v2-unk-without-zero-score-takes-unk-id": ("unigram-cased", {"unk_id": 2}, None, "scored_unk"),
    "albert-cased": ("albert", {"do_lower_case": False}, None, None),
    "albert-keep-accents": ("albert", {"keep_accents": True}, None, None),
    "albert-no-prefix-space": ("albert", {"add_prefix_space": False}, None, None),
    "albert-keeps-the-json-post-processor": ("albert", {"do_lower_case": False}, None, "bert_frame"),
}


def _scored_unk(spec):
    """[UNK] with a score other than 0.0: DebertaV2Tokenizer finds it by (piece, 0.0), so it falls
    back to tokenizer_config.json's unk_id."""
    spec["model"]["vocab"] = [[p, -5.0 if p == "[UNK]" else s] for p, s in spec["model"]["vocab"]]


def _bert_frame(spec):
    """A post-processor AlbertTokenizer would not build ([SEP] A; A B): it keeps this one."""
    sep = spec["post_processor"]["special_tokens"]["[SEP]"]
    spec["post_processor"] = {
        "type": "TemplateProcessing", "special_tokens": {"[SEP]": sep},
        "single": [{"SpecialToken": {"id": "[SEP]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}]}


JSON_EDITS = {"scored_unk": _scored_unk, "bert_frame": _bert_frame}


@pytest.fixture(scope="module")
def saved_bases(tmp_path_factory, corpus_texts):
    """Trained tokenizers saved once with the class transformers uses for them: name -> folder."""
    bases = {}
    for name, kind, lowercase, cls in [("wordpiece-uncased", "wordpiece", True, "BertTokenizer"),
                                       ("wordpiece-cased", "wordpiece", False, "BertTokenizer"),
                                       ("bpe", "bpe", False, "RobertaTokenizer"),
                                       ("unigram-cased", "unigram", False, "DebertaV2Tokenizer"),
                                       ("unigram-uncased", "unigram", True, "DebertaV2Tokenizer")]:
        tok = train_tokenizer(corpus_texts[:300], TokenizerSettings(kind=kind, vocab_size=800, lowercase=lowercase))
        bases[name] = tmp_path_factory.mktemp(name)
        tok.save(bases[name], cls, 128)
    return bases


@pytest.fixture(scope="module")
def albert_json(tmp_path_factory, albert_spiece):
    """ALBERT's spiece.model saved as tokenizer.json (its normalizer holds the Precompiled charsmap)."""
    directory = tmp_path_factory.mktemp("albert-json")
    bertkit.load_tokenizer(albert_spiece).save(directory, "AlbertTokenizer", 512)
    return directory


def _changed_copy(base, folder, config_changes=None, model_type=None, json_edit=None):
    """A copy of the saved folder `base` with tokenizer_config.json changed (DROP removes a key), a
    config.json naming model_type, and tokenizer.json edited in place."""
    shutil.copytree(base, folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    for key, value in (config_changes or {}).items():
        if value is DROP:
            config.pop(key, None)
        else:
            config[key] = value
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    if model_type is not None:
        (folder / "config.json").write_text(json.dumps({"model_type": model_type}))
    if json_edit is not None:
        spec = json.loads((folder / "tokenizer.json").read_text())
        json_edit(spec)
        (folder / "tokenizer.json").write_text(json.dumps(spec))
    return folder


@pytest.mark.parametrize("case", CLASS_CASES)
def test_tokenizer_json_is_read_the_way_its_transformers_class_reads_it(case, request, tmp_path):
    """transformers 5's BertTokenizer, RobertaTokenizer, DebertaV2Tokenizer, AlbertTokenizer (and
    DistilBERT's, ELECTRA's) keep only tokenizer.json's vocabulary and rebuild the rest from
    tokenizer_config.json, with the class's defaults where it is silent; the class comes from
    tokenizer_config.json, else from config.json's model_type. Where the two files disagree, the
    config wins; TokenizersBackend (PreTrainedTokenizerFast, ModernBERT) reads tokenizer.json as is."""
    base, changes, model_type, edit = CLASS_CASES[case]
    base_dir = request.getfixturevalue("albert_json") if base == "albert" else request.getfixturevalue("saved_bases")[base]
    folder = _changed_copy(base_dir, tmp_path / "case", changes, model_type, JSON_EDITS.get(edit))
    ours = bertkit.load_tokenizer(folder)
    reference = transformers.AutoTokenizer.from_pretrained(folder)
    _assert_same_ids(ours, reference, HARD + SENTENCES + ALBERT_TEXT)  # ALBERT_TEXT: specials inside words
    assert (ours.mask_token_id, ours.pad_token_id, ours.vocab_size) == (
        reference.mask_token_id, reference.pad_token_id, len(reference))


@pytest.mark.parametrize("config_lists_added_tokens", [False, True])
def test_rebuilt_tokenizer_json_keeps_its_added_tokens_unless_the_config_lists_them(
        saved_bases, tmp_path, config_lists_added_tokens):
    """A rebuilding class registers tokenizer.json's added tokens, flags included (here <mask> that
    takes the space before it, and a token added after training), only when tokenizer_config.json has
    no added_tokens_decoder; a config that has one replaces the file's list (transformers'
    PreTrainedTokenizerBase._from_pretrained), so the extra token is gone."""
    def edit(spec):
        for token in spec["added_tokens"]:
            token["lstrip"] = token["content"] == "<mask>"
        new_id = max(spec["model"]["vocab"].values()) + 1
        spec["added_tokens"].append({"id": new_id, "content": "<new>", "single_word": False, "lstrip": False,
                                     "rstrip": False, "normalized": False, "special": True})

    listed = {str(i): {"content": t, "special": True} for i, t in enumerate(["<s>", "<pad>", "</s>", "<unk>", "<mask>"])}
    changes = {"add_prefix_space": True, "added_tokens_decoder": listed if config_lists_added_tokens else DROP}
    folder = _changed_copy(saved_bases["bpe"], tmp_path / "bpe", changes, json_edit=edit)
    ours = bertkit.load_tokenizer(folder)
    reference = transformers.AutoTokenizer.from_pretrained(folder)
    _assert_same_ids(ours, reference, NEW_TOKENS_TEXT + ["a <mask> b <new> c", "x<new>y"] + HARD[:20])
    assert len(ours) == len(reference) == 800 + (not config_lists_added_tokens)


@pytest.mark.parametrize("config_lists_added_tokens", [False, True])
def test_special_tokens_map_wins_only_without_added_tokens_decoder(saved_bases, tmp_path, config_lists_added_tokens):
    """transformers reads special_tokens_map.json only when tokenizer_config.json has no
    added_tokens_decoder, and then its tokens win over the config's; a token tokenizer.json lists
    keeps the flags it has there (<mask> takes no lstrip from the map)."""
    listed = {str(i): {"content": t, "special": True} for i, t in enumerate(["<s>", "<pad>", "</s>", "<unk>", "<mask>"])}
    changes = {"added_tokens_decoder": listed if config_lists_added_tokens else DROP}
    folder = _changed_copy(saved_bases["bpe"], tmp_path / "bpe", changes)
    (folder / "special_tokens_map.json").write_text(json.dumps(
        {"mask_token": {"content": "<mask>", "lstrip": True, "rstrip": False, "normalized": False, "single_word": False},
         "pad_token": "<unk>"}))
    ours = bertkit.load_tokenizer(folder)
    reference = transformers.AutoTokenizer.from_pretrained(folder)
    _assert_same_ids(ours, reference, NEW_TOKENS_TEXT + ["a <mask> b", "x <mask>"])
    assert (ours.pad_token_id, ours.mask_token_id) == (reference.pad_token_id, reference.mask_token_id)


@pytest.fixture(scope="module")
def deberta_base_layout(tmp_path_factory, roberta_files):
    """A folder laid out like microsoft/deberta-base: GPT-2-style vocab.json + merges.txt holding
    BERT's token names, tokenizer_config.json {"do_lower_case": false, "vocab_type": "gpt2"} and
    config.json's model_type "deberta"; no file names a special token."""
    directory = tmp_path_factory.mktemp("deberta")
    renamed = {"<s>": "[CLS]", "</s>": "[SEP]", "<pad>": "[PAD]", "<unk>": "[UNK]", "<mask>": "[MASK]"}
    vocab = json.loads((roberta_files / "vocab.json").read_text())
    (directory / "vocab.json").write_text(json.dumps({renamed.get(t, t): i for t, i in vocab.items()}))
    shutil.copy(roberta_files / "merges.txt", directory)
    (directory / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": False, "vocab_type": "gpt2"}))
    (directory / "config.json").write_text(json.dumps({"model_type": "deberta", "vocab_size": len(vocab)}))
    return directory


@pytest.mark.parametrize("source", ["vocab.json", "tokenizer.json"])
def test_deberta_v1_layout_equals_transformers(deberta_base_layout, tmp_path, source):
    """DeBERTa v1's DebertaTokenizer: byte-level BPE under [CLS] [SEP] [UNK] [PAD] [MASK] (all in the
    vocabulary), [CLS] A [SEP] [SEP] B [SEP] with segment ids all 0. From tokenizer.json it rebuilds
    the post-processor (dropped from the file here) and takes the class's special tokens too."""
    folder = deberta_base_layout
    if source == "tokenizer.json":
        folder = tmp_path / "with-json"
        transformers.AutoTokenizer.from_pretrained(deberta_base_layout).save_pretrained(folder)
        spec = json.loads((folder / "tokenizer.json").read_text())
        spec["post_processor"] = None
        (folder / "tokenizer.json").write_text(json.dumps(spec))
        for name in ("tokenizer_config.json", "config.json"):
            shutil.copy(deberta_base_layout / name, folder)
        (folder / "special_tokens_map.json").unlink(missing_ok=True)
    ours = bertkit.load_tokenizer(folder)
    reference = transformers.AutoTokenizer.from_pretrained(folder)
    assert type(reference) is transformers.DebertaTokenizer
    texts = HARD + SENTENCES + ["a [MASK] b", "Hello[MASK]world", "[CLS] [SEP] [PAD] typed by a user"]
    _assert_same_ids(ours, reference, texts)
    size = len(json.loads((deberta_base_layout / "vocab.json").read_text()))
    assert all(max(ours.encode(a, b)) < size for a, b in zip(texts, reversed(texts)))
    assert (ours.special_tokens["cls_token"], ours.special_tokens["mask_token"]) == ("[CLS]", "[MASK]")
    assert (ours.mask_token_id, ours.pad_token_id, ours.vocab_size) == (
        reference.mask_token_id, reference.pad_token_id, len(reference)) and ours.vocab_size == size
    # the data pipeline frames plain ids the same way
    a, b = ours.encode_plain(["Hello world", "second part"])
    ids, types = ours.frame.apply(np.array(a), np.array(b))
    assert ids.tolist() == reference.encode("Hello world", "second part")
    assert types.tolist() == reference("Hello world", "second part")["token_type_ids"]


def test_truncation_in_one_thread_never_reaches_another(minilm_dir):
    """`__call__(max_length=...)` switches truncation on in the shared backend for its own call:
    plain calls and encode() running in another thread meanwhile must come back whole, and the
    truncated ones cut (without the lock about one call in twenty went wrong either way)."""
    import copy
    import pickle
    import threading

    tok = bertkit.load_tokenizer(minilm_dir)
    texts = ["word " * 50] * 8
    full = tok(texts)["input_ids"].shape[1]
    wrong = []

    def truncating():
        for _ in range(300):
            wrong.extend(["cut call came back whole"] * (tok(texts, max_length=5)["input_ids"].shape[1] != 5))

    def plain():
        for _ in range(300):
            wrong.extend(["plain call cut"] * (tok(texts)["input_ids"].shape[1] != full))
            wrong.extend(["encode cut"] * (len(tok.encode(texts[0])) != full))

    threads = [threading.Thread(target=truncating), threading.Thread(target=plain)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not wrong, f"{len(wrong)} wrong: {sorted(set(wrong))}"
    for twin in (copy.deepcopy(tok), pickle.loads(pickle.dumps(tok))):  # the lock is made afresh
        assert twin(texts, max_length=5)["input_ids"].shape[1] == 5 and twin.encode(texts[0]) == tok.encode(texts[0])
    fresh = bertkit.load_tokenizer(minilm_dir)  # its caches not yet filled: the same pickle (datasets' fingerprint)
    tok.continues_word()
    assert pickle.dumps(fresh) == pickle.dumps(tok) and tok.frame is not None


def test_legacy_added_tokens_json_is_read_as_transformers_reads_it(minilm_dir, tmp_path):
    """Tokenizers saved before transformers 4.34 kept added tokens in added_tokens.json (token -> id);
    without an added_tokens_decoder in tokenizer_config.json, transformers still applies it."""
    shutil.copy(minilm_dir / "vocab.txt", tmp_path)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True, "tokenizer_class": "BertTokenizer",
                                                               "mask_token": "[MASK]"}))
    (tmp_path / "added_tokens.json").write_text(json.dumps({"<new>": 30522, "hello-world": 30523}))
    reference = transformers.AutoTokenizer.from_pretrained(tmp_path)
    ours = bertkit.load_tokenizer(tmp_path)
    for text in ("a <new> b", "say hello-world now", "HELLO-WORLD", "x<new>y", *SENTENCES[:3]):
        assert ours.encode(text) == reference.encode(text), text
    assert len(ours) == len(reference) == 30524
    (tmp_path / "added_tokens.json").write_text(json.dumps({"<new>": "30522"}))
    with pytest.raises(bertkit.BertkitError, match="added_tokens.json: expected an object of tokens and their ids"):
        bertkit.load_tokenizer(tmp_path)


@pytest.mark.parametrize("where", ["tokenizer_config.json", "special_tokens_map.json"])
def test_a_named_special_token_the_vocabulary_lacks_is_appended(minilm_dir, tmp_path, where):
    """transformers appends it as a new id: a BERT vocabulary given mask_token "<mask>" then has a
    mask id (bertkit had none, and tokenized "<mask>" as text)."""
    shutil.copy(minilm_dir / "vocab.txt", tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert"}))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True}))
    (tmp_path / where).write_text(json.dumps({**({"do_lower_case": True} if where.startswith("tok") else {}),
                                              "mask_token": "<mask>"}))
    reference = transformers.AutoTokenizer.from_pretrained(tmp_path)
    ours = bertkit.load_tokenizer(tmp_path)
    assert ours.encode("a <mask> b") == reference.encode("a <mask> b")
    assert ours.mask_token_id == reference.mask_token_id == 30522 and len(ours) == len(reference)


def test_legacy_special_tokens_map_lists_additional_special_tokens(minilm_dir, tmp_path):
    """Pre-4.34 NER checkpoints mark entities with [unusedN] tokens listed only in
    special_tokens_map.json's additional_special_tokens: whole tokens, as in transformers (which
    keeps tokenizer_config.json's own list instead when it has one)."""
    shutil.copy(minilm_dir / "vocab.txt", tmp_path)
    (tmp_path / "special_tokens_map.json").write_text(json.dumps({
        "mask_token": "[MASK]", "additional_special_tokens": ["[unused0]", "[unused1]"]}))
    for own in ({}, {"additional_special_tokens": ["[unused5]"]}):
        (tmp_path / "tokenizer_config.json").write_text(json.dumps(
            {"do_lower_case": True, "tokenizer_class": "BertTokenizer", **own}))
        reference = transformers.AutoTokenizer.from_pretrained(tmp_path)
        ours = bertkit.load_tokenizer(tmp_path)
        for text in ("[unused0] Paris [unused1] is [unused5] nice", "x[unused0]y", *SENTENCES[:2]):
            assert ours.encode(text) == reference.encode(text), (own, text)


@pytest.mark.parametrize("own", [{}, {"additional_special_tokens": ["<ent>"]}, {"extra_special_tokens": ["newword"]}])
def test_legacy_added_tokens_keep_their_flags_against_the_special_tokens_maps_list(minilm_dir, tmp_path, own):
    """A token of added_tokens.json that special_tokens_map.json's additional_special_tokens also
    lists stays a normalized, non-special token in transformers ("A <ENT>" finds it, decoding
    without special tokens keeps it); one tokenizer_config.json lists is special."""
    shutil.copy(minilm_dir / "vocab.txt", tmp_path)
    (tmp_path / "added_tokens.json").write_text(json.dumps({"<ent>": 30522, "newword": 30523}))
    (tmp_path / "special_tokens_map.json").write_text(json.dumps({"mask_token": "[MASK]",
                                                                  "additional_special_tokens": ["<ent>"]}))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True,
                                                               "tokenizer_class": "BertTokenizer", **own}))
    reference, ours = transformers.AutoTokenizer.from_pretrained(tmp_path), bertkit.load_tokenizer(tmp_path)
    ours.save_pretrained(tmp_path / "saved")  # and as saved, read by either
    for theirs, mine in ((reference, ours), (transformers.AutoTokenizer.from_pretrained(tmp_path / "saved"),
                                              bertkit.load_tokenizer(tmp_path / "saved"))):
        assert mine.all_special_ids == theirs.all_special_ids, own  # "<ent>" there: never masked
        assert mine.all_special_tokens == theirs.all_special_tokens, own
        for text in ("a <ent> b", "x<ent>y", "A <ENT> b", "newword x", "NEWWORD x"):
            ids = reference.encode(text)
            assert mine.encode(text) == theirs.encode(text) == ids, (own, text)
            assert mine.decode(ids, skip_special_tokens=True) == theirs.decode(ids, skip_special_tokens=True), text
            assert mine.get_special_tokens_mask(ids, already_has_special_tokens=True) == \
                theirs.get_special_tokens_mask(ids, already_has_special_tokens=True), (own, text)


@pytest.mark.parametrize("source", ["wordpiece-cased", "bpe", "unigram-uncased"])
@pytest.mark.parametrize("cls", ["BertTokenizer", "RobertaTokenizer", "DebertaTokenizer", "DebertaV2Tokenizer",
                                 "AlbertTokenizer"])
def test_a_tokenizer_saved_under_a_class_that_would_rebuild_it_otherwise_is_saved_generic(
        saved_bases, source, cls, tmp_path):
    """A model's family names the class, but its tokenizer may be of another kind (a BERT encoder
    with XLM-R's Unigram tokenizer). Declared as a class whose rebuild differs, transformers would
    force the vocabulary into another pipeline (mostly [UNK]); such a tokenizer is saved as
    PreTrainedTokenizerFast, which reads tokenizer.json as is. Either way transformers gives its ids."""
    tok = bertkit.load_tokenizer(saved_bases[source])
    tok.save(tmp_path, cls, 128)
    written = json.loads((tmp_path / "tokenizer_config.json").read_text())["tokenizer_class"]
    native = {"wordpiece-cased": "BertTokenizer", "bpe": "RobertaTokenizer", "unigram-uncased": "DebertaV2Tokenizer"}
    assert written == (cls if cls == native[source] else "PreTrainedTokenizerFast")
    reference = transformers.AutoTokenizer.from_pretrained(tmp_path)
    for text in HARD[:20] + SENTENCES[:3]:
        assert reference.encode(text) == tok.encode(text), text


def test_a_class_of_another_kind_than_the_file_is_read_as_the_file_with_a_warning(minilm_dir, reference, tmp_path):
    """transformers' RobertaTokenizer would force MiniLM's WordPiece vocabulary into byte-level BPE
    (character ids); bertkit reads the file as it is, and now says it departs from transformers."""
    shutil.copytree(minilm_dir, tmp_path / "a", ignore=shutil.ignore_patterns("*.safetensors", "*.bin", "*.onnx"))
    config = json.loads((tmp_path / "a" / "tokenizer_config.json").read_text())
    (tmp_path / "a" / "tokenizer_config.json").write_text(json.dumps({**config, "tokenizer_class": "RobertaTokenizer"}))
    with pytest.warns(UserWarning, match=r"tokenizer.json: the files name RobertaTokenizer, a BPE tokenizer, but this "
                                         r"file holds a WordPiece model; it is read as it is") as caught:
        ours = bertkit.load_tokenizer(tmp_path / "a")
    assert caught[0].filename == __file__
    assert ours.encode("Hello world") == reference.encode("Hello world")
    forced = transformers.AutoTokenizer.from_pretrained(tmp_path / "a")
    assert forced.encode("Hello world") != ours.encode("Hello world")


@pytest.mark.parametrize("source", ["vocab.txt", "tokenizer.json"])
def test_a_bert_vocabulary_without_mask_gets_berttokenizers_default_appended(minilm_dir, tmp_path, source):
    """BertTokenizer names [MASK] (and [PAD] ...) by default; a vocabulary without it gets it
    appended as a new id in transformers, and so in bertkit (it had no mask token at all)."""
    if source == "vocab.txt":
        lines = (minilm_dir / "vocab.txt").read_text(encoding="utf-8").splitlines()
        (tmp_path / "vocab.txt").write_text("".join(("[MASKX]" if t == "[MASK]" else t) + "\n" for t in lines),
                                            encoding="utf-8")
    else:
        spec = json.loads((minilm_dir / "tokenizer.json").read_text())
        spec["model"]["vocab"]["[MASKX]"] = spec["model"]["vocab"].pop("[MASK]")
        spec["added_tokens"] = [a for a in spec["added_tokens"] if a["content"] != "[MASK]"]
        (tmp_path / "tokenizer.json").write_text(json.dumps(spec))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True, "tokenizer_class": "BertTokenizer"}))
    reference = transformers.AutoTokenizer.from_pretrained(tmp_path)
    ours = bertkit.load_tokenizer(tmp_path)
    assert ours.encode("a [MASK] b") == reference.encode("a [MASK] b")
    assert ours.mask_token_id == reference.mask_token_id == 30522 and len(ours) == len(reference)


def test_one_text_and_its_pair_as_strings_and_lengths_that_leave_no_text_are_refused(tokenizer):
    pair = tokenizer("hello", "world")["input_ids"]
    assert pair.tolist() == tokenizer(["hello"], ["world"])["input_ids"].tolist()
    assert pair.shape == (1, 5)  # [CLS] hello [SEP] world [SEP], not five one-letter pairs
    assert tokenizer.decode(pair[0], True) == tokenizer.decode(pair[0].tolist(), True) == "hello world"
    for bad in (0, 2, -1):
        with pytest.raises(bertkit.BertkitError, match="max_length must be a whole number of at least 3"):
            tokenizer(["a b c"], max_length=bad)
    with pytest.raises(bertkit.BertkitError, match="at least 5"):
        tokenizer(["a b"], ["c d"], max_length=4)
    assert tokenizer(["a b c"], max_length=3)["input_ids"].shape == (1, 3)


@pytest.fixture(scope="module")
def xlmr_spm(tmp_path_factory, corpus_texts):
    """XLM-R's slow-tokenizer folder: sentencepiece.bpe.model (SentencePiece's own ids: <unk> <s>
    </s> first) and a config naming model_type xlm-roberta."""
    spm = pytest.importorskip("sentencepiece")
    raw = tmp_path_factory.mktemp("xlmr-spm")
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus_texts[:400]), model_prefix=str(raw / "sp"), vocab_size=1000,
        model_type="unigram", minloglevel=2)
    (raw / "sp.model").rename(raw / "sentencepiece.bpe.model")
    (raw / "sp.vocab").unlink()
    (raw / "config.json").write_text(json.dumps({"model_type": "xlm-roberta"}))
    return raw


def test_xlm_roberta_sentencepiece_file_alone_is_read_with_fairseqs_ids(xlmr_spm):
    ours = bertkit.load_tokenizer(xlmr_spm)
    reference = transformers.AutoTokenizer.from_pretrained(xlmr_spm)
    _assert_same_ids(ours, reference, HARD + SENTENCES + ["x </s> y <mask> z", "trailing  "])
    assert (ours.mask_token_id, ours.pad_token_id, ours.vocab_size) == (
        reference.mask_token_id, reference.pad_token_id, len(reference))


@pytest.fixture(scope="module")
def xlmr_folder(tmp_path_factory, xlmr_spm):
    """XLM-R's tokenizer as transformers saves it (sentencepiece.bpe.model converted by its
    XLMRobertaTokenizer), beside a config naming model_type bert, as multilingual sentence
    encoders (paraphrase-multilingual-MiniLM, multilingual-e5) ship it."""
    folder = tmp_path_factory.mktemp("xlmr")
    transformers.AutoTokenizer.from_pretrained(xlmr_spm).save_pretrained(folder)
    (folder / "config.json").write_text(json.dumps({"model_type": "bert"}))
    return folder


def _transformers_4_xlmr_json(spec):
    """The tokenizer.json transformers 4's XLMRobertaConverter wrote: spaces squeezed by the
    normalizer, words split by Metaspace alone (XLMRobertaTokenizer 5 rebuilds both)."""
    spec["normalizer"] = {"type": "Sequence", "normalizers": [
        *([spec["normalizer"]] if spec["normalizer"] else []),
        {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}]}
    spec["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True}


@pytest.mark.parametrize("layout", ["transformers-5", "transformers-4"])
def test_xlm_roberta_tokenizer_is_rebuilt_as_transformers_rebuilds_it(xlmr_folder, layout, tmp_path):
    folder = _changed_copy(xlmr_folder, tmp_path / "xlmr", json_edit=_transformers_4_xlmr_json
                           if layout == "transformers-4" else None)
    ours = bertkit.load_tokenizer(folder)
    reference = transformers.AutoTokenizer.from_pretrained(folder)
    assert type(reference).__name__ == "XLMRobertaTokenizer"
    texts = HARD + SENTENCES + ["hello ", "trailing  spaces   ", "x </s> y <mask> z"]
    _assert_same_ids(ours, reference, texts)
    assert (ours.mask_token_id, ours.pad_token_id, ours.vocab_size) == (
        reference.mask_token_id, reference.pad_token_id, len(reference))
    ours.save(tmp_path / "saved", "XLMRobertaTokenizer", 128)  # declared as the class, which rebuilds it alike
    assert json.loads((tmp_path / "saved" / "tokenizer_config.json").read_text())["tokenizer_class"] == "XLMRobertaTokenizer"
    again = transformers.AutoTokenizer.from_pretrained(tmp_path / "saved")
    for text in texts:
        assert again.encode(text) == reference.encode(text), repr(text)


@pytest.fixture(scope="module")
def camembert_folder(tmp_path_factory, xlmr_folder):
    """CamemBERT's tokenizer as transformers saves it: CamembertTokenizer around a fairseq-style
    vocabulary (its NOTUSED pieces first; <unk> not at XLM-R's fixed id 3), beside a config naming
    model_type camembert."""
    pieces = [tuple(p) for p in json.loads((xlmr_folder / "tokenizer.json").read_text())["model"]["vocab"]]
    words = [p for p in pieces if p[0] not in ("<s>", "<pad>", "</s>", "<unk>", "<mask>")]
    vocab = [("<s>NOTUSED", 0.0), ("<pad>", 0.0), ("</s>NOTUSED", 0.0), ("<unk>NOTUSED", -100.0), ("<unk>", 0.0),
             ("<s>", 0.0), ("</s>", 0.0), *words, ("<mask>", 0.0)]
    folder = tmp_path_factory.mktemp("camembert")
    transformers.CamembertTokenizer(vocab=vocab).save_pretrained(folder)
    (folder / "config.json").write_text(json.dumps({"model_type": "camembert"}))
    return folder


@pytest.mark.parametrize("layout", ["as-saved", "transformers-4", "no-class"])
def test_camembert_tokenizer_is_rebuilt_as_transformers_rebuilds_it(camembert_folder, layout, tmp_path):
    # "no-class": tokenizer_config.json names no class, so config.json's model_type picks it
    folder = _changed_copy(camembert_folder, tmp_path / "camembert",
                           {"tokenizer_class": DROP} if layout == "no-class" else None,
                           json_edit=_transformers_4_xlmr_json if layout == "transformers-4" else None)
    ours = bertkit.load_tokenizer(folder)
    reference = transformers.AutoTokenizer.from_pretrained(folder)
    assert type(reference).__name__ == "CamembertTokenizer"
    texts = HARD + SENTENCES + ["hello ", "trailing  spaces   ", "x </s> y <mask> z", "a <s>NOTUSED b", "zzqx"]
    _assert_same_ids(ours, reference, texts)
    assert (ours.mask_token_id, ours.pad_token_id, ours.unk_token_id, ours.vocab_size) == (
        reference.mask_token_id, reference.pad_token_id, reference.unk_token_id, len(reference))
    assert ours.decode(ours.encode("hello world"), skip_special_tokens=True) == "hello world"
    ours.save(tmp_path / "saved", "CamembertTokenizer", 128)  # declared as the class, which rebuilds it alike
    assert json.loads((tmp_path / "saved" / "tokenizer_config.json").read_text())["tokenizer_class"] == "CamembertTokenizer"
    again = transformers.AutoTokenizer.from_pretrained(tmp_path / "saved")
    assert all(again.encode(text) == reference.encode(text) for text in texts)


def test_camembert_sentencepiece_file_alone_is_refused_not_read_as_xlm_roberta(xlmr_spm, tmp_path):
    shutil.copy(xlmr_spm / "sentencepiece.bpe.model", tmp_path / "sentencepiece.bpe.model")
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "camembert"}))
    with pytest.raises(bertkit.BertkitError, match="CamemBERT's tokenizer from its tokenizer.json"):
        bertkit.load_tokenizer(tmp_path)


def test_a_post_processor_sequence_frames_examples_as_its_template_does(saved_bases, tmp_path):
    """tokenizers writes Sequence[ByteLevel, TemplateProcessing] for many byte-level files; the data
    pipeline read only a bare template and refused these in finetune and pretrain."""
    def in_sequence(spec):
        spec["post_processor"] = {"type": "Sequence", "processors": [
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
            spec["post_processor"]]}

    folder = _changed_copy(saved_bases["bpe"], tmp_path / "seq", {"tokenizer_class": "PreTrainedTokenizerFast"},
                           json_edit=in_sequence)
    ours = bertkit.load_tokenizer(folder)
    reference = transformers.AutoTokenizer.from_pretrained(folder)
    assert json.loads(ours.backend.to_str())["post_processor"]["type"] == "Sequence"
    for a, b in PAIRS + [("a film", None)]:
        pa, pb = ours.encode_plain([a, b or ""])
        ids, types = ours.frame.apply(np.array(pa), np.array(pb) if b else None)
        assert ids.tolist() == ours.encode(a, b) == reference.encode(a, b)
        assert types.tolist() == ours.backend.encode(a, b).type_ids


@pytest.mark.parametrize("files, named, where", [
    ("vocab.txt", "BertJapaneseTokenizer", "tokenizer_config"), ("vocab.json", "HerbertTokenizerFast", "tokenizer_config"),
    ("vocab.txt", "MPNetTokenizer", "config"), ("vocab.txt", "mpnet", "model_type"),
    ("vocab.txt", "MobileBertTokenizer", "tokenizer_config"), ("vocab.json", "LongformerTokenizer", "tokenizer_config"),
    ("vocab.txt", "squeezebert", "model_type"), ("vocab.json", "longformer", "model_type")])
def test_a_vocabulary_file_of_a_class_bertkit_does_not_build_is_refused(minilm_dir, roberta_files, tmp_path, files,
                                                                       named, where):
    # read as BERT's WordPiece / RoBERTa's byte-level BPE, the first four gave other ids than
    # transformers; the last two are classes transformers builds as BERT's and RoBERTa's
    source = minilm_dir if files == "vocab.txt" else roberta_files
    for name in ("vocab.txt", "vocab.json", "merges.txt"):
        if (source / name).exists():
            shutil.copy(source / name, tmp_path / name)
    if where == "tokenizer_config":
        (tmp_path / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": named}))
    else:
        (tmp_path / "config.json").write_text(json.dumps(
            {"model_type": named} if where == "model_type" else {"model_type": "bert", "tokenizer_class": named}))
    if named in ("MobileBertTokenizer", "LongformerTokenizer", "squeezebert", "longformer"):
        reference = transformers.AutoTokenizer.from_pretrained(tmp_path)
        for text in SENTENCES[:3]:
            assert bertkit.load_tokenizer(tmp_path).encode(text) == reference.encode(text)
        return
    shown = f"model_type '{named}'" if where == "model_type" else f"tokenizer_class '{named.removesuffix('Fast')}'"
    with pytest.raises(bertkit.BertkitError, match=f"{shown}.*{files}"):
        bertkit.load_tokenizer(tmp_path)


def test_split_special_tokens_reads_typed_specials_as_text_as_transformers_does(minilm_dir, tmp_path):
    import pickle

    shutil.copytree(minilm_dir, tmp_path / "split")
    config = json.loads((tmp_path / "split" / "tokenizer_config.json").read_text())
    (tmp_path / "split" / "tokenizer_config.json").write_text(json.dumps({**config, "split_special_tokens": True}))
    ours = bertkit.load_tokenizer(tmp_path / "split")
    reference = transformers.AutoTokenizer.from_pretrained(tmp_path / "split")
    text = "a [MASK] and a [SEP] typed in"
    assert ours.encode(text) == reference.encode(text) != bertkit.load_tokenizer(minilm_dir).encode(text)
    assert pickle.loads(pickle.dumps(ours)).encode(text) == reference.encode(text)  # what DDP workers get
    assert ours.to_str() != bertkit.load_tokenizer(minilm_dir).to_str()  # a token cache is not shared
    ours.save(tmp_path / "saved", "BertTokenizer", 128)
    assert transformers.AutoTokenizer.from_pretrained(tmp_path / "saved").encode(text) == reference.encode(text)


def test_transformers_call_keywords_give_transformers_batches(minilm_tokenizers):
    ours, reference = minilm_tokenizers
    texts = ["a short one", "a much longer text that runs on for a good many words indeed", ""]
    pairs = ["its pair", "another pair of words", "x"]

    def same(kwargs, pair=False):
        args = (texts, pairs) if pair else (texts,)
        theirs = reference(*args, **kwargs)
        mine = ours(*args, **kwargs)
        for key in ("input_ids", "attention_mask", "token_type_ids"):
            a, b = mine[key], theirs[key]
            assert (a.tolist() if hasattr(a, "tolist") else a) == (b.tolist() if hasattr(b, "tolist") else b), (kwargs, key)
        return mine

    assert isinstance(same(dict(padding=True, truncation=True, max_length=8, return_tensors="pt"))["input_ids"],
                      torch.Tensor)
    assert isinstance(same(dict(padding="max_length", max_length=20, return_tensors="np"))["input_ids"], np.ndarray)
    assert isinstance(same(dict(padding=False, return_tensors=None))["input_ids"], list)  # ragged lists
    same(dict(padding=True, return_tensors=None))
    for strategy, length in (("longest_first", 9), ("only_first", 9), ("only_second", 18)):
        same(dict(padding=True, truncation=strategy, max_length=length, return_tensors="pt"), pair=True)
    with pytest.raises(Exception, match="Truncation error"):  # the long first text leaves the second no room
        reference(texts, pairs, truncation="only_second", max_length=9)
    with pytest.raises(bertkit.BertkitError, match="could not truncate to max_length 9: Truncation error"):
        ours(texts, pairs, truncation="only_second", max_length=9)
    same(dict(padding=True, truncation=False, max_length=4, return_tensors="pt"))  # max_length without cutting
    same(dict(padding=True, truncation=True, return_tensors="pt"))  # to model_max_length
    assert (ours.cls_token_id, ours.sep_token_id, ours.unk_token_id) == (
        reference.cls_token_id, reference.sep_token_id, reference.unk_token_id)
    with pytest.raises(bertkit.BertkitError, match="different lengths: tensors need padding"):
        ours(texts, padding=False)
    with pytest.raises(bertkit.BertkitError, match="return_tensors must be 'pt', 'np' or None"):
        ours(texts, return_tensors="tf")


def test_transformers_tokenizer_names_give_what_transformers_gives(minilm_dir, roberta_files, albert_spiece, tmp_path,
                                                                  corpus_texts):
    folders = {"minilm": minilm_dir, "roberta": roberta_files, "albert": _albert_dir(tmp_path / "albert", albert_spiece)}
    for name, folder in folders.items():  # (transformers needs RoBERTa's class named: the folder has no config)
        reference = transformers.RobertaTokenizerFast if name == "roberta" else transformers.AutoTokenizer
        ours, theirs = bertkit.load_tokenizer(folder), reference.from_pretrained(folder)
        for text in [*HARD[:6], *SENTENCES[:3]]:
            assert ours.tokenize(text) == theirs.tokenize(text), (name, text)
            assert ours.tokenize(text, "a pair", add_special_tokens=True) == theirs.tokenize(
                text, "a pair", add_special_tokens=True), (name, text)
            tokens = theirs.tokenize(text)
            assert ours.convert_tokens_to_ids(tokens) == theirs.convert_tokens_to_ids(tokens), (name, text)
        assert ours.convert_tokens_to_ids("no-such-token-here") == theirs.convert_tokens_to_ids("no-such-token-here")
        assert ours.model_max_length == theirs.model_max_length, name
        for key in ("bos_token", "eos_token", "bos_token_id", "eos_token_id"):
            assert getattr(ours, key) == getattr(theirs, key), (name, key)
        # saved alone, it loads in transformers as the same tokenizer
        ours.save_pretrained(tmp_path / f"saved-{name}")
        again = transformers.AutoTokenizer.from_pretrained(tmp_path / f"saved-{name}")
        for a, b in PAIRS:
            assert again.encode(a, b) == theirs.encode(a, b), (name, a, b)
        assert again.model_max_length == theirs.model_max_length, name
    trained = train_tokenizer(corpus_texts[:300], TokenizerSettings(kind="wordpiece", vocab_size=600))
    trained.save_pretrained(tmp_path / "trained")
    assert transformers.AutoTokenizer.from_pretrained(tmp_path / "trained").encode(*PAIRS[0]) == trained.encode(*PAIRS[0])
    with pytest.raises(bertkit.BertkitError, match="tokens must be strings, not int"):
        trained.convert_tokens_to_ids([5])
    batch = bertkit.load_tokenizer(minilm_dir)(["a text"]).to("cpu")
    assert set(batch) == {"input_ids", "attention_mask", "token_type_ids"} and batch["input_ids"].device.type == "cpu"


def test_transformers_attributes_and_keywords_act_as_they_do_there(minilm_dir, reference, tmp_path):
    ours = bertkit.load_tokenizer(minilm_dir)
    theirs = transformers.AutoTokenizer.from_pretrained(minilm_dir)
    texts = ["a", "a b c d e f g"]
    # attributes set on the tokenizer act on the next calls (they were ignored without a word)
    for tok in (ours, theirs):
        tok.padding_side, tok.truncation_side, tok.model_max_length = "left", "left", 6
    kept = ours(texts, truncation=True)
    expected = theirs(texts, padding=True, truncation=True, return_tensors="pt")
    for key in ("input_ids", "attention_mask"):
        assert kept[key].tolist() == expected[key].tolist(), key
    ours.pad_token, theirs.pad_token = "[UNK]", "[UNK]"
    assert ours.pad_token_id == theirs.pad_token_id == 100 and ours.pad_token == "[UNK]"
    ours.eos_token = "[SEP]"  # one BERT's files do not name: kept and saved too
    ours.save_pretrained(tmp_path)
    again = transformers.AutoTokenizer.from_pretrained(tmp_path)
    assert (again.padding_side, again.truncation_side, again.model_max_length, again.pad_token, again.eos_token) == (
        "left", "left", 6, "[UNK]", "[SEP]")
    ours.bos_token = None  # unset, as transformers takes None
    assert ours.bos_token is None and ours.bos_token_id is None
    for bad, said in ((("padding_side", "middle"), "padding_side must be 'left' or 'right'"),
                      (("pad_token", "[NOPE]"), "pad_token: '\\[NOPE\\]' is not a token of this vocabulary"),
                      (("model_max_length", 0), "model_max_length must be a positive whole number, got 0")):
        with pytest.raises(bertkit.BertkitError, match=said):
            setattr(ours, *bad)
    fresh = bertkit.load_tokenizer(minilm_dir)
    text, pair = "Hello there, world!", "and a pair"
    # transformers' keywords and one-text results
    assert fresh.encode(text, add_special_tokens=False) == reference.encode(text, add_special_tokens=False)
    assert fresh(text=text, text_pair=pair)["input_ids"].tolist() == reference(
        text, text_pair=pair, return_tensors="pt")["input_ids"].tolist()
    for options in (dict(padding=False), dict(padding=True), dict(add_special_tokens=False)):
        assert fresh(text, return_tensors=None, **options) == dict(reference(text, **options)), options
    assert fresh([text], return_tensors=None)["input_ids"] == [reference.encode(text)]  # a list stays a batch
    # the vocabulary without added tokens, as transformers counts it; len() with them
    fresh.backend.add_tokens(["newword"])
    reference_added = transformers.AutoTokenizer.from_pretrained(minilm_dir)
    reference_added.add_tokens(["newword"])
    assert (fresh.vocab_size, len(fresh)) == (reference_added.vocab_size, len(reference_added))
    assert fresh.get_vocab() == reference_added.get_vocab()
    assert fresh.all_special_ids == reference.all_special_ids  # in transformers' order
    assert fresh.all_special_tokens == reference.all_special_tokens
    ids = reference(["one text", "and another one"], padding=True, return_tensors="pt")["input_ids"]
    assert fresh.decode(ids[0, 1].item()) == reference.decode(ids[0, 1].item())
    assert fresh.decode(ids) == reference.decode(ids) == reference.batch_decode(ids)
    # a batch moves in place, as BatchEncoding does
    batch = fresh(["a text"])
    assert batch.to("cpu", non_blocking=True) is batch
    with pytest.raises(bertkit.BertkitError, match="give texts or text, not both"):
        fresh("a", text="b")


def test_pad_and_special_tokens_mask_serve_transformers_data_collators(minilm_dir, reference):
    from transformers import DataCollatorForLanguageModeling, DataCollatorForTokenClassification, DataCollatorWithPadding

    ours = bertkit.load_tokenizer(minilm_dir)
    texts = ["a short one", "a somewhat longer text, with more words in it", "mid length text"]
    features = [{**reference(t), "label": i % 2} for i, t in enumerate(texts)]  # lists, as datasets.map gives them
    for options in (dict(), dict(pad_to_multiple_of=8), dict(padding="max_length", max_length=20)):
        got, expected = (DataCollatorWithPadding(tok, **options)(features) for tok in (ours, reference))
        assert set(got) == set(expected), options
        for key in expected:
            assert got[key].tolist() == expected[key].tolist(), (options, key)
    tagged = [{**reference(t), "labels": list(range(len(reference(t)["input_ids"])))} for t in texts]
    got, expected = (DataCollatorForTokenClassification(tok)(tagged) for tok in (ours, reference))
    assert {k: v.tolist() for k, v in got.items()} == {k: v.tolist() for k, v in expected.items()}
    plain = [{"input_ids": reference(t)["input_ids"]} for t in texts]
    for seed in (0, 1):
        got, expected = (DataCollatorForLanguageModeling(tok, seed=seed)(plain) for tok in (ours, reference))
        for key in expected:
            assert got[key].tolist() == expected[key].tolist(), (seed, key)
    ids = reference("x y")["input_ids"]
    assert ours.get_special_tokens_mask(ids, already_has_special_tokens=True) == reference.get_special_tokens_mask(
        ids, already_has_special_tokens=True)
    a, b = (reference(t, add_special_tokens=False)["input_ids"] for t in ("x y", "z"))
    assert ours.get_special_tokens_mask(a, b) == reference("x y", "z", return_special_tokens_mask=True)[
        "special_tokens_mask"]
    assert ours.pad({"input_ids": [5, 6]}, padding="max_length", max_length=4) == reference.pad(
        {"input_ids": [5, 6]}, padding="max_length", max_length=4)
    assert ours.pad(plain, padding_side="left", return_tensors="np")["input_ids"].tolist() == reference.pad(
        plain, padding_side="left", return_tensors="np")["input_ids"].tolist()
    with pytest.raises(bertkit.BertkitError, match="rows of different lengths: tensors need padding"):
        ours.pad(plain, padding=False, return_tensors="pt")
    # whole-word masking reads the offsets and is_fast; Trainer's length grouping model_input_names
    words = [{k: v[i] for k, v in tok(texts, padding=True, return_tensors="pt", return_offsets_mapping=True).items()}
             for tok in (ours, reference) for i in range(len(texts))]
    got, expected = (DataCollatorForLanguageModeling(tok, whole_word_mask=True, mlm_probability=0.5, seed=3)(rows)
                     for tok, rows in ((ours, words[:3]), (reference, words[3:])))
    assert {k: v.tolist() for k, v in got.items()} == {k: v.tolist() for k, v in expected.items()}
    assert set(ours.model_input_names) == set(reference.model_input_names)
    tokens = reference.tokenize("Tokenization isn't trivial, Müller!")
    assert ours.convert_tokens_to_string(tokens) == reference.convert_tokens_to_string(tokens)
    assert [ours.num_special_tokens_to_add(p) for p in (False, True)] == \
        [reference.num_special_tokens_to_add(p) for p in (False, True)]
    assert ours.special_tokens_map == reference.special_tokens_map
    assert ours.get_added_vocab() == reference.get_added_vocab()


def _listed_values(value):
    return value.tolist() if hasattr(value, "tolist") else value


@pytest.mark.parametrize("name", ["minilm", "roberta", "albert"])
def test_offsets_word_ids_words_given_split_and_windows_are_transformers(name, minilm_dir, roberta_files,
                                                                         albert_spiece, tmp_path):
    """return_offsets_mapping, return_special_tokens_mask, is_split_into_words, overflowing
    windows with a stride and the batch's word_ids / sequence_ids / tokens per row, as
    transformers' fast tokenizers give them (what a tagger's label alignment and a QA window's
    character spans are built from)."""
    folder = {"minilm": minilm_dir, "roberta": roberta_files,
              "albert": _albert_dir(tmp_path / "albert", albert_spiece)}[name]
    reference = transformers.RobertaTokenizerFast if name == "roberta" else transformers.AutoTokenizer
    ours, theirs = bertkit.load_tokenizer(folder), reference.from_pretrained(folder)
    texts = ["Tokenization isn't trivial, Mr. Müller!", "a short one", "x"]
    pairs = ["its pair, here", "another pair of words", "y z"]
    words = [["John", "Müller", "lives", "in", "New", "York", "."], ["Hi", "there"], ["tokenization"]]
    extra = dict(return_offsets_mapping=True, return_special_tokens_mask=True)
    calls = [((texts,), dict(return_tensors="pt", **extra)),
             ((texts, pairs), dict(return_tensors="pt", padding_side="left", **extra)),
             ((texts,), dict(return_tensors=None, padding=False, **extra)),
             ((texts, pairs), dict(return_tensors="np", truncation=True, max_length=12, **extra)),
             ((words,), dict(return_tensors="pt", is_split_into_words=True, **extra)),
             ((words[0],), dict(return_tensors=None, is_split_into_words=True, **extra)),
             ((words, words[::-1]), dict(return_tensors=None, is_split_into_words=True, **extra)),
             ((texts[0],), dict(return_tensors=None, return_offsets_mapping=True))]
    long = ["The Eiffel Tower, in Paris, opened in 1889; it is 330 metres tall. " * 3, "A short context."]
    overflowing = dict(return_overflowing_tokens=True, stride=6, return_offsets_mapping=True)  # QA's windows
    calls += [((texts[:2], long), dict(return_tensors="pt", truncation="only_second", max_length=48,
                                       padding="max_length", **overflowing)),
              ((long[0],), dict(return_tensors=None, truncation=True, max_length=20, **overflowing)),
              ((long,), dict(return_tensors="np", truncation=True, max_length=20, padding_side="left", **overflowing))]
    for args, kwargs in calls:
        mine, expected = ours(*args, **kwargs), theirs(*args, padding=kwargs.pop("padding", True), **kwargs)
        for key in expected:
            assert _listed_values(mine[key]) == _listed_values(expected[key]), (args, kwargs, key)
        rows = len(mine["input_ids"]) if isinstance(mine["input_ids"][0], (list, torch.Tensor, np.ndarray)) else 1
        assert "stride" not in kwargs or rows > (len(args[0]) if isinstance(args[0], list) else 1)  # windows
        for row in range(rows):
            for view in ("word_ids", "sequence_ids", "tokens"):
                assert getattr(mine, view)(row) == getattr(expected, view)(row), (args, kwargs, view, row)
    plain = ours(texts, return_token_type_ids=False, return_attention_mask=False)
    assert set(plain) == {"input_ids"}
    with pytest.raises(bertkit.BertkitError, match="batch_index 3 is not a row of this batch of 3"):
        plain.word_ids(3)
    with pytest.raises(bertkit.BertkitError, match=r"texts: item 1 is str, not a list of words \(is_split"):
        ours([["a", "b"], "c d"], is_split_into_words=True)
    with pytest.raises(bertkit.BertkitError, match="texts: item 0: item 1 is int, not a string"):
        ours([["a", 5]], is_split_into_words=True)
    with pytest.raises(bertkit.BertkitError, match="could not truncate to max_length 20: tokenizer stride set to 30"):
        ours(long, truncation=True, max_length=20, stride=30, return_overflowing_tokens=True)
    with pytest.raises(bertkit.BertkitError, match="stride must be a whole number of tokens, at least 0, got -1"):
        ours(long, truncation=True, max_length=20, stride=-1, return_overflowing_tokens=True)


def test_added_tokens_and_resized_embeddings_save_as_transformers_reads_them(minilm_dir, reference, tmp_path):
    """transformers' add_tokens / add_special_tokens, then model.resize_token_embeddings(len(tokenizer)):
    the same counts, ids, decoding and special-token masks as transformers' tokenizer given the
    same calls, and a saved folder transformers loads with the same ids and logits."""
    import copy

    ours, theirs = bertkit.load_tokenizer(minilm_dir), copy.deepcopy(reference)
    calls = [("add_tokens", (["covid19", "hello", "<ent>"],)), ("add_tokens", ("hello",)),
             ("add_tokens", (["[E9]"], True)),
             ("add_special_tokens", ({"additional_special_tokens": ["[E1]", "[E2]"]},)),
             ("add_special_tokens", ({"pad_token": "<pad2>"},))]
    for name, args in calls:
        assert getattr(ours, name)(*args) == getattr(theirs, name)(*args), (name, args)
    assert len(ours) == len(theirs) and ours.pad_token_id == theirs.pad_token_id
    assert ours.added_tokens_encoder == theirs.added_tokens_encoder
    assert {i: str(t) for i, t in ours.added_tokens_decoder.items()} == \
        {i: str(t) for i, t in theirs.added_tokens_decoder.items()}
    texts = ["covid19 is here [E1] Paris [E2] <pad2>", "COVID19 <ent> hello", "x[E1]y[E9]"]
    for text in texts:
        ids = theirs.encode(text)
        assert ours.encode(text) == ids, text
        assert ours.decode(ids, skip_special_tokens=True) == theirs.decode(ids, skip_special_tokens=True), text
        if "[E9]" not in text:  # transformers' mask leaves out add_tokens(special_tokens=True)'s, its decode not
            assert ours.get_special_tokens_mask(ids, already_has_special_tokens=True) == \
                theirs.get_special_tokens_mask(ids, already_has_special_tokens=True), text
    model = bertkit.build("bert-base", head="mlm", num_layers=1, hidden_size=32, num_heads=2, intermediate_size=64,
                          vocab_size=30522)
    model.tokenizer = ours
    with pytest.raises(bertkit.BertkitError, match=r"rows \(ids 0..30521\); tokens added to a tokenizer need "
                                                    r"model.resize_token_embeddings\(len\(tokenizer\)\)"):
        model(**ours(texts))
    model.resize_token_embeddings(len(ours))
    model.save_pretrained(tmp_path / "saved")
    again = transformers.AutoTokenizer.from_pretrained(tmp_path / "saved")
    hf = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path / "saved").eval()
    batch = again(texts, padding=True, return_tensors="pt")
    assert batch["input_ids"].tolist() == ours(texts)["input_ids"].tolist()
    real = batch["attention_mask"].bool()  # (padding's logits are nobody's)
    with torch.no_grad():
        torch.testing.assert_close(model.eval()(**ours(texts)).logits[real], hf(**batch).logits[real], atol=1e-4,
                                   rtol=0)
    with pytest.raises(bertkit.BertkitError, match="unknown special token key 'foo_token'"):
        ours.add_special_tokens({"foo_token": "x"})
    with pytest.raises(bertkit.BertkitError, match="add_tokens takes a token"):
        ours.add_tokens([""])


@pytest.mark.parametrize("cls", ["BertTokenizer", "DistilBertTokenizer", "ElectraTokenizer", "PreTrainedTokenizerFast"])
def test_a_call_returns_the_inputs_the_named_class_takes(minilm_dir, tmp_path, cls, corpus_texts):
    """Without model_input_names in the files, the class decides (DistilBERT's and a generic
    tokenizer.json's take no token_type_ids); a tokenizer bertkit trained gives all three, and
    saved for a family, what that family's class gives."""
    shutil.copytree(minilm_dir, tmp_path / "a", ignore=shutil.ignore_patterns("*.safetensors", "*.bin", "*.onnx"))
    config = json.loads((tmp_path / "a" / "tokenizer_config.json").read_text())
    (tmp_path / "a" / "tokenizer_config.json").write_text(json.dumps({**config, "tokenizer_class": cls}))
    ours, theirs = bertkit.load_tokenizer(tmp_path / "a"), transformers.AutoTokenizer.from_pretrained(tmp_path / "a")
    assert ours.model_input_names == list(theirs.model_input_names)
    assert set(ours(["a text"], ["b"])) == set(theirs(["a text"], ["b"]))
    # saved, even as a model of another class saves it, it still gives them (a save named all three for
    # ALBERT and generic folders, and the saved model's pair logits changed)
    for saved_as in ("BertTokenizer", "PreTrainedTokenizerFast"):
        ours.save(tmp_path / saved_as, saved_as, 64)
        again = transformers.AutoTokenizer.from_pretrained(tmp_path / saved_as)
        assert set(again(["a text"], ["b"])) == set(bertkit.load_tokenizer(tmp_path / saved_as)(["a text"], ["b"])) \
            == set(theirs(["a text"], ["b"])), saved_as
    trained = train_tokenizer(corpus_texts[:200], TokenizerSettings.for_family("roberta", vocab_size=400))
    assert set(trained(["a text"])) == {"input_ids", "token_type_ids", "attention_mask"}
    trained.save(tmp_path / "r", "RobertaTokenizer", 64)
    saved = bertkit.load_tokenizer(tmp_path / "r")
    reference = transformers.AutoTokenizer.from_pretrained(tmp_path / "r")
    assert set(saved(["a text"], ["b"])) == set(reference(["a text"], ["b"])) == {"input_ids", "attention_mask"}


def test_model_input_names_of_the_files_are_kept_and_saved(minilm_dir, tmp_path):
    """transformers reads them from tokenizer_config.json (a DistilBERT's have no token_type_ids);
    a folder saved by bertkit dropped them, so transformers then returned token_type_ids."""
    shutil.copytree(minilm_dir, tmp_path / "a", ignore=shutil.ignore_patterns("*.safetensors", "*.bin", "*.onnx"))
    config = json.loads((tmp_path / "a" / "tokenizer_config.json").read_text())
    (tmp_path / "a" / "tokenizer_config.json").write_text(json.dumps(
        {**config, "model_input_names": ["input_ids", "attention_mask"]}))
    ours, reference = bertkit.load_tokenizer(tmp_path / "a"), transformers.AutoTokenizer.from_pretrained(tmp_path / "a")
    assert ours.model_input_names == reference.model_input_names
    # and a call returns what they name (it returned token_type_ids too), or what it is told to
    for told in ({}, {"return_token_type_ids": True}, {"return_attention_mask": False}):
        assert set(ours(["a text"], ["b"], **told)) == set(reference(["a text"], ["b"], **told)), told
    ours.save_pretrained(tmp_path / "b")
    again = transformers.AutoTokenizer.from_pretrained(tmp_path / "b")
    assert again.model_input_names == ["input_ids", "attention_mask"] and "token_type_ids" not in again("a text")
    assert bertkit.load_tokenizer(minilm_dir).model_input_names == ["input_ids", "token_type_ids", "attention_mask"]
