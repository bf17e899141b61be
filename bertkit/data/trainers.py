"""Training a tokenizer from a corpus, one recipe per family:

- WordPiece (BERT, DistilBERT, ELECTRA), cased or uncased: BERT's normalizer and pre-tokenizer,
  "##" continuations, [PAD] [UNK] [CLS] [SEP] [MASK] (Devlin et al., 2019, sec. 3; Wu et al., 2016).
- Byte-level BPE (RoBERTa; Liu et al., 2019, sec. 4.4): GPT-2's 256 byte symbols as the initial
  alphabet, so no input is ever unknown; <s> <pad> </s> <unk> <mask>.
- Unigram (ALBERT, DeBERTa-v3; Kudo, 2018), SentencePiece-style: "▁" marks word starts;
  [PAD] [CLS] [SEP] [UNK] [MASK] (DeBERTa-v3's order).

Each returns a `Tokenizer` with the same pipeline `load_tokenizer` builds for that family's
files, so a trained tokenizer saved with a checkpoint reloads (and loads in transformers) as is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from tokenizers import AddedToken
from tokenizers import Tokenizer as _Backend
from tokenizers import models, pre_tokenizers, trainers

from ..errors import BertkitError
from .tokenizer import (BERT_SPECIALS, DEBERTA_V3_SPECIALS, ROBERTA_SPECIALS, Tokenizer,
                        byte_level_bpe_pipeline, unigram_pipeline, wordpiece_pipeline)

KINDS = ("wordpiece", "bpe", "unigram")
CASED_FAMILIES = ("deberta-v3", "deberta-v2")  # besides byte-level BPE, which is always cased
FAMILY_KIND = {"bert": "wordpiece", "distilbert": "wordpiece", "electra": "wordpiece", "roberta": "bpe", "modernbert": "bpe",
               "albert": "unigram", "deberta-v3": "unigram", "deberta-v2": "unigram", "deberta": "bpe"}


@dataclass(frozen=True)
class TokenizerSettings:
    kind: str = "wordpiece"
    vocab_size: int = 8192
    lowercase: bool | None = None  # None: WordPiece and Unigram lowercase; byte-level BPE is always cased
    min_frequency: int = 2         # pairs (BPE, WordPiece) seen fewer times are not merged

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise BertkitError(f"unknown tokenizer kind {self.kind!r}; choose one of {', '.join(KINDS)}")
        if self.kind == "bpe" and self.lowercase:
            raise BertkitError("byte-level BPE reads bytes as they are and cannot lowercase; lowercase the corpus "
                               "itself, or leave lowercase unset")
        if self.lowercase is None:
            object.__setattr__(self, "lowercase", self.kind != "bpe")
        if self.vocab_size < 300:
            alphabet = "all 256 bytes" if self.kind == "bpe" else "the corpus's characters"
            raise BertkitError(f"vocab_size {self.vocab_size} is too small (at least 300: {alphabet} and the "
                               "special tokens must fit, with room for pieces)")

    @classmethod
    def for_family(cls, family: str, **overrides) -> "TokenizerSettings":
        """The family's kind, cased as its released tokenizer is unless `overrides` say (BERT,
        DistilBERT, ELECTRA and ALBERT lowercase, as their best-known checkpoints do; DeBERTa-v3's
        SentencePiece vocabulary is cased)."""
        if family not in FAMILY_KIND:
            raise BertkitError(f"no tokenizer recipe for {family!r}; choose one of {', '.join(FAMILY_KIND)}")
        overrides.setdefault("lowercase", family not in CASED_FAMILIES and FAMILY_KIND[family] != "bpe")
        return cls(kind=FAMILY_KIND[family], **overrides)


def train_tokenizer(texts: Iterable[str], settings: TokenizerSettings = TokenizerSettings()) -> Tokenizer:
    """Learn a vocabulary from `texts` (any iterable, streamed: it is read once, never held)."""
    if settings.kind == "wordpiece":
        specials = dict(BERT_SPECIALS)
        config = {"do_lower_case": settings.lowercase}
        order = _ordered(specials, "pad unk cls sep mask")
        # a placeholder vocabulary in the trainer's order assembles the pipeline (normalizer,
        # pre-tokenizer); training then replaces the model, and the special ids stay put
        backend = wordpiece_pipeline({t: i for i, t in enumerate(order)}, config)
        trainer = trainers.WordPieceTrainer(vocab_size=settings.vocab_size, min_frequency=settings.min_frequency,
                                            special_tokens=list(order), continuing_subword_prefix="##",
                                            show_progress=False)
    elif settings.kind == "bpe":
        specials = dict(ROBERTA_SPECIALS)
        order = _ordered(specials, "bos pad eos unk mask")  # RoBERTa's ids 0..3, <mask> last
        backend = _Backend(models.BPE(continuing_subword_prefix="", end_of_word_suffix="", fuse_unk=False))
        trainer = trainers.BpeTrainer(vocab_size=settings.vocab_size, min_frequency=settings.min_frequency,
                                      special_tokens=list(order), initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                      show_progress=False)
        backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        config = {}
    else:
        specials = dict(DEBERTA_V3_SPECIALS)
        config = {"do_lower_case": settings.lowercase}
        order = list(_ordered(specials, "pad cls sep unk mask"))
        backend = unigram_pipeline([(t, 0.0) for t in order], order.index(specials["unk_token"]), specials,
                                   lowercase=settings.lowercase)
        trainer = trainers.UnigramTrainer(vocab_size=settings.vocab_size, special_tokens=order,
                                          unk_token=specials["unk_token"], show_progress=False)
    backend.train_from_iterator(_nonempty(texts), trainer=trainer)
    if backend.get_vocab_size() <= len(specials):
        raise BertkitError("the corpus is empty: a tokenizer cannot be trained on no text")
    # the post-processor holds special-token ids, which training may have renumbered: rebuild
    if settings.kind == "wordpiece":
        backend = wordpiece_pipeline(_fixed_order(backend.get_vocab(with_added_tokens=True), order), config)
    elif settings.kind == "bpe":
        backend = byte_level_bpe_pipeline(backend.get_vocab(with_added_tokens=False), _bpe_merges(backend), specials)
        # Byte-level BPE keeps a word's space in its token ("Ġgood"), so a masked word is one
        # <mask> where "Ġword" was; lstrip lets the mask take the space before it, so that
        # "was <mask> good" reads as pre-training showed it, as released RoBERTa files mark it.
        mask = specials["mask_token"]
        backend.add_special_tokens([AddedToken(mask, lstrip=True, rstrip=False, normalized=False, special=True)])
    else:
        unk = backend.token_to_id(specials["unk_token"])
        pieces = _unigram_pieces(backend)
        backend = unigram_pipeline(pieces, unk, specials, lowercase=settings.lowercase)
    return Tokenizer(backend, specials, config)


def _fixed_order(vocab: dict[str, int], specials: tuple[str, ...]) -> dict[str, int]:
    """WordPiece ids in an order of their own: the trainer lists its alphabet and pieces of equal
    count in hash-table order, which changes from run to run, so the same corpus gave other ids
    each time. A WordPiece vocabulary tokenizes by its set alone (longest match first); the special
    tokens keep their ids, the rest go by length and then by text, single characters first."""
    rest = sorted((t for t in vocab if t not in specials), key=lambda t: (len(t.removeprefix("##")), t))
    return {t: i for i, t in enumerate([*specials, *rest])}


def _ordered(specials: dict[str, str], keys: str) -> tuple[str, ...]:
    return tuple(specials[k + "_token"] for k in keys.split())


def _nonempty(texts: Iterable[str]) -> Iterable[str]:
    for text in texts:
        if text and not text.isspace():
            yield text


def _bpe_merges(backend: _Backend) -> list[tuple[str, str]]:
    import json

    merges = json.loads(backend.to_str())["model"]["merges"]
    return [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in merges]


def _unigram_pieces(backend: _Backend) -> list[tuple[str, float]]:
    import json

    return [tuple(p) for p in json.loads(backend.to_str())["model"]["vocab"]]
