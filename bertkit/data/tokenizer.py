"""Tokenizers, backed by Hugging Face's `tokenizers` library (Rust, fast, the same files).

A `Tokenizer` wraps a `tokenizers.Tokenizer` whose post-processor already adds the family's
special tokens, plus the metadata `transformers` keeps in tokenizer_config.json.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from tokenizers import Tokenizer as _Backend
from tokenizers import models, normalizers, pre_tokenizers, processors, decoders

from ..errors import BertkitError
from ..files import read_json

BERT_SPECIALS = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]",
                 "mask_token": "[MASK]"}
SPECIAL_KEYS = ("unk_token", "sep_token", "pad_token", "cls_token", "mask_token", "bos_token", "eos_token")


class Tokenizer:
    def __init__(self, backend: _Backend, special_tokens: dict[str, str], config: dict | None = None):
        self.backend = backend
        self.backend.no_padding()
        self.backend.no_truncation()
        self.special_tokens = dict(special_tokens)
        self.config = dict(config or {})  # extra tokenizer_config.json fields (e.g. do_lower_case)

    # ---- special tokens -------------------------------------------------------------------
    def _special_id(self, key: str) -> int | None:
        token = self.special_tokens.get(key)
        return None if token is None else self.backend.token_to_id(token)

    @property
    def pad_token_id(self) -> int:
        pad = self._special_id("pad_token")
        return 0 if pad is None else pad

    @property
    def mask_token(self) -> str | None:
        return self.special_tokens.get("mask_token")

    @property
    def mask_token_id(self) -> int | None:
        return self._special_id("mask_token")

    @property
    def vocab_size(self) -> int:
        return self.backend.get_vocab_size(with_added_tokens=True)

    # ---- encoding -------------------------------------------------------------------------
    def encode(self, text: str, text_pair: str | None = None) -> list[int]:
        """Ids with the family's special tokens, like `transformers`' `encode`."""
        return self.backend.encode(text, text_pair).ids

    def __call__(self, texts: list[str] | str, text_pairs: list[str] | None = None,
                 max_length: int | None = None) -> dict[str, torch.Tensor]:
        """A right-padded batch: input_ids, attention_mask, token_type_ids, each (B, T) int64.
        Longer inputs are truncated to max_length (the longest part first, for pairs)."""
        if isinstance(texts, str):
            texts = [texts]
        if text_pairs is not None and len(text_pairs) != len(texts):
            raise BertkitError(f"{len(texts)} texts but {len(text_pairs)} text pairs")
        if max_length is not None:
            self.backend.enable_truncation(max_length)
        try:
            inputs = list(zip(texts, text_pairs)) if text_pairs is not None else list(texts)
            encodings = self.backend.encode_batch(inputs)
        finally:
            self.backend.no_truncation()
        T = max((len(e.ids) for e in encodings), default=0)
        batch = {k: torch.zeros(len(encodings), T, dtype=torch.long)
                 for k in ("input_ids", "attention_mask", "token_type_ids")}
        batch["input_ids"].fill_(self.pad_token_id)
        for i, e in enumerate(encodings):
            n = len(e.ids)
            batch["input_ids"][i, :n] = torch.tensor(e.ids)
            batch["attention_mask"][i, :n] = 1
            batch["token_type_ids"][i, :n] = torch.tensor(e.type_ids)
        return batch

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return self.backend.decode(ids, skip_special_tokens=skip_special_tokens)

    def id_to_token(self, i: int) -> str | None:
        return self.backend.id_to_token(i)

    # ---- files ----------------------------------------------------------------------------
    def save(self, directory: str | Path, tokenizer_class: str, model_max_length: int) -> list[Path]:
        """Write tokenizer.json, tokenizer_config.json and special_tokens_map.json (plus vocab.txt
        for WordPiece), the files `transformers.AutoTokenizer` reads. Returns the paths written."""
        directory = Path(directory)
        written = [directory / "tokenizer.json", directory / "tokenizer_config.json",
                   directory / "special_tokens_map.json"]
        self.backend.save(str(written[0]))
        config = {**self.config, **self.special_tokens, "tokenizer_class": tokenizer_class,
                  "model_max_length": model_max_length}
        written[1].write_text(json.dumps(config, indent=2) + "\n")
        written[2].write_text(json.dumps(self.special_tokens, indent=2) + "\n")
        if isinstance(self.backend.model, models.WordPiece):
            vocab = self.backend.get_vocab(with_added_tokens=False)
            ordered = sorted(vocab, key=vocab.__getitem__)
            written.append(directory / "vocab.txt")
            written[-1].write_text("".join(t + "\n" for t in ordered), encoding="utf-8")
        return written


def _wordpiece_from_vocab(vocab_file: Path, config: dict) -> _Backend:
    """BERT's WordPiece pipeline around a vocab.txt, cased or not as tokenizer_config.json says
    (no config means uncased, the default of BERT's released tokenizer)."""
    vocab: dict[str, int] = {}
    with open(vocab_file, encoding="utf-8") as f:
        for line in f:
            token = line.rstrip("\n")
            if token in vocab:
                continue  # a repeated line keeps its first id, as transformers does
            vocab[token] = len(vocab)
    special = {k: config.get(k, default) for k, default in
               (("unk_token", "[UNK]"), ("cls_token", "[CLS]"), ("sep_token", "[SEP]"))}
    for key, token in special.items():
        if token not in vocab:
            raise BertkitError(f"{vocab_file}: the {key} {token!r} is not in the vocabulary")
    lower = bool(config.get("do_lower_case", True))
    backend = _Backend(models.WordPiece(vocab, unk_token=special["unk_token"]))
    backend.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=config.get("tokenize_chinese_chars", True),
        strip_accents=config.get("strip_accents"), lowercase=lower)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    cls, sep = special["cls_token"], special["sep_token"]
    backend.post_processor = processors.TemplateProcessing(
        single=f"{cls}:0 $A:0 {sep}:0", pair=f"{cls}:0 $A:0 {sep}:0 $B:1 {sep}:1",
        special_tokens=[(cls, vocab[cls]), (sep, vocab[sep])])
    backend.decoder = decoders.WordPiece(prefix="##")
    specials = [t for t in (config.get(k) for k in SPECIAL_KEYS) if t and t in vocab]
    backend.add_special_tokens(specials or [special["unk_token"], cls, sep])
    return backend


def load_tokenizer(path: str | Path) -> Tokenizer:
    """A tokenizer from a checkpoint directory, a tokenizer.json or a vocab.txt (WordPiece)."""
    path = Path(path)
    directory = path if path.is_dir() else path.parent
    if not path.exists():
        raise BertkitError(f"{path}: no such file or directory")
    config_file = directory / "tokenizer_config.json"
    config = read_json(config_file) if config_file.exists() else {}
    special = {k: config[k] for k in SPECIAL_KEYS if isinstance(config.get(k), str)}
    special_map = directory / "special_tokens_map.json"
    if special_map.exists():
        for k, v in read_json(special_map).items():
            token = v.get("content") if isinstance(v, dict) else v
            if k in SPECIAL_KEYS and isinstance(token, str):
                special.setdefault(k, token)
    kept = {k: v for k, v in config.items() if k in ("do_lower_case", "strip_accents", "tokenize_chinese_chars")}
    if path.is_dir():
        candidates = [directory / "tokenizer.json", directory / "vocab.txt"]
        found = next((c for c in candidates if c.exists()), None)
        if found is None:
            raise BertkitError(f"{path}: no tokenizer.json or vocab.txt in this directory")
        path = found
    if path.name.endswith(".json"):
        try:
            backend = _Backend.from_file(str(path))
        except Exception as e:  # tokenizers raises a bare Exception with serde's message
            raise BertkitError(f"{path}: not a readable tokenizer.json ({str(e).splitlines()[0]})") from None
    elif path.suffix == ".txt":
        backend = _wordpiece_from_vocab(path, config)
    else:
        raise BertkitError(f"{path}: unknown tokenizer file (expected tokenizer.json or vocab.txt)")
    # Files without a tokenizer_config.json still name BERT's special tokens in their vocabulary.
    for key, token in BERT_SPECIALS.items():
        if key not in special and backend.token_to_id(token) is not None:
            special[key] = token
    return Tokenizer(backend, special, kept)
