"""Tokenizer loading and saving against transformers (issue 6 grows the battery)."""

import shutil

import pytest
import transformers

import bertkit
from test_minilm import SENTENCES

PAIRS = [("How old are you?", "I am six."), ("", "only the second part"), ("Ünïcödé", "日本語")]


@pytest.fixture(scope="module")
def reference(minilm_dir):
    return transformers.AutoTokenizer.from_pretrained(minilm_dir)


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
