"""Training a tokenizer from a corpus, one recipe per family:

- WordPiece (BERT, DistilBERT, ELECTRA), cased or uncased: BERT's normalizer and pre-tokenizer,
  "##" continuations, [PAD] [UNK] [CLS] [SEP] [MASK] (Devlin et al., 2019, sec. 3; Wu et al., 2016).
- Byte-level BPE (RoBERTa; Liu et al., 2019, sec. 4.4): GPT-2's 256 byte symbols as the initial
  alphabet, so no input is ever unknown; <s> <pad> </s> <unk> <mask>.
- Unigram (ALBERT, DeBERTa-v3; Kudo, 2018), SentencePiece-style: "▁" marks word starts;
  [PAD] [CLS] [SEP] [UNK] [MASK] (DeBERTa-v3's order), or for ALBERT its own normalizer (accents
  dropped) and <pad> <unk> [CLS] [SEP] [MASK], so that transformers' AlbertTokenizer and AlbertConfig's
  bos/eos ids (2, 3) read it as released ALBERT's.

A vocabulary never holds more tokens than asked: WordPiece keeps the corpus's most frequent
characters (as BERT's vocabularies do, `limit_alphabet`); Unigram must hold every character, so
a corpus with more than the request is refused, naming the count.

Each returns a `Tokenizer` with the same pipeline `load_tokenizer` builds for that family's
files, so a trained tokenizer saved with a checkpoint reloads (and loads in transformers) as is.
"""

from __future__ import annotations

import json
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

from tokenizers import AddedToken
from tokenizers import Tokenizer as _Backend
from tokenizers import models, pre_tokenizers, trainers

from ..config import check_field_types
from ..errors import BertkitError
from .tokenizer import (ALBERT_SPECIALS, BERT_SPECIALS, DEBERTA_V3_SPECIALS, ROBERTA_SPECIALS, Tokenizer,
                        albert_pipeline, byte_level_bpe_pipeline, unigram_pipeline, wordpiece_pipeline)

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
    family: str | None = None      # whose special tokens and normalizer ("albert"); None: the kind's own

    def __post_init__(self) -> None:
        check_field_types(self)
        if self.kind not in KINDS:
            raise BertkitError(f"unknown tokenizer kind {self.kind!r}; choose one of {', '.join(KINDS)}")
        if self.family is not None and FAMILY_KIND.get(self.family) != self.kind:
            raise BertkitError(f"family {self.family!r} has no {self.kind} recipe; "
                               f"choose one of {', '.join(f for f, k in FAMILY_KIND.items() if k == self.kind)}")
        if self.min_frequency < 0:
            raise BertkitError(f"min_frequency must be at least 0, got {self.min_frequency}")
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
        return cls(kind=FAMILY_KIND[family], family=family, **overrides)


def train_tokenizer(texts: Iterable[str], settings: TokenizerSettings = TokenizerSettings()) -> Tokenizer:
    """Learn a vocabulary from `texts` (any iterable, streamed: it is read once, never held in
    memory; it is spooled to a temporary file, which the trainer reads, and WordPiece may count it)."""
    with tempfile.TemporaryDirectory(prefix="bertkit-tokenizer-") as tmp:
        return _train(_spool(texts, Path(tmp) / "corpus.txt"), settings)


def _train(corpus: tuple[Path, Counter[str]], settings: TokenizerSettings) -> Tokenizer:
    path, chars = corpus
    if not chars:
        raise BertkitError("the corpus is empty: a tokenizer cannot be trained on no text")
    if settings.kind == "wordpiece":
        specials = dict(BERT_SPECIALS)
        config = {"do_lower_case": settings.lowercase}
        order = _ordered(specials, "pad unk cls sep mask")
        # a placeholder vocabulary in the trainer's order assembles the pipeline (normalizer,
        # pre-tokenizer); training then replaces the model, and the special ids stay put
        backend = wordpiece_pipeline({t: i for i, t in enumerate(order)}, config)
        trainer = trainers.WordPieceTrainer(vocab_size=settings.vocab_size, min_frequency=settings.min_frequency,
                                            special_tokens=list(order), continuing_subword_prefix="##",
                                            show_progress=False, **_alphabet(backend, chars, settings))
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
        albert = settings.family == "albert"
        specials = dict(ALBERT_SPECIALS if albert else DEBERTA_V3_SPECIALS)
        # ALBERT's own ids (<unk> 1, [CLS] 2, [SEP] 3: AlbertTokenizer's unk_id, AlbertConfig's bos/eos ids)
        order = list(_ordered(specials, "pad unk cls sep mask" if albert else "pad cls sep unk mask"))
        config = {"do_lower_case": settings.lowercase, **({"keep_accents": False} if albert else {})}

        def unigram(pieces: list[tuple[str, float]], unk: int) -> _Backend:
            if albert:  # AlbertTokenizer's normalizer: accents dropped, as released ALBERT's are
                return albert_pipeline(pieces, unk, specials, lowercase=settings.lowercase)
            return unigram_pipeline(pieces, unk, specials, lowercase=settings.lowercase)

        backend = unigram([(t, 0.0) for t in order], order.index(specials["unk_token"]))
        trainer = trainers.UnigramTrainer(vocab_size=settings.vocab_size, special_tokens=order,
                                          unk_token=specials["unk_token"], show_progress=False)
    try:
        backend.train_from_iterator(_documents(path), trainer=trainer)
    except Exception as e:  # Unigram: "The vocabulary is not large enough to contain all chars"
        if settings.kind != "unigram":
            raise
        _too_many_characters(backend, path, settings, len(order), e)
    if settings.kind == "unigram" and backend.get_vocab_size() > settings.vocab_size:
        _too_many_characters(backend, path, settings, len(order))  # it keeps every character, whatever was asked
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
        backend = unigram(_unigram_pieces(backend), backend.token_to_id(specials["unk_token"]))
    if backend.get_vocab_size() > settings.vocab_size:  # (the alphabet limits above keep this from happening)
        raise BertkitError(f"the trained vocabulary has {backend.get_vocab_size():,} tokens, more than the "
                           f"{settings.vocab_size:,} asked for")
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


WORDPIECE_ALPHABET = 1000  # BERT's vocabularies keep ~1,000 characters (tokenizers' limit_alphabet default)


def _spool(texts: Iterable[str], path: Path) -> tuple[Path, Counter[str]]:
    """Write the documents with text to `path`, one JSON string a line (a document's own line breaks
    kept), and return it with the count of each character they use (none: the corpus is empty)."""
    chars: Counter[str] = Counter()
    with open(path, "w", encoding="utf-8") as f:
        for text in texts:
            if text and not text.isspace():
                chars.update(text)
                f.write(json.dumps(text) + "\n")
    return path, chars


def _documents(path: Path) -> Iterator[str]:
    with open(path, encoding="utf-8") as f:
        for line in f:
            yield json.loads(line)


def _alphabet(backend: _Backend, chars: Counter[str], settings: TokenizerSettings) -> dict:
    """WordPiece's trainer keeps every character, and a "##" form of each seen inside a word: a
    corpus of 4,000 CJK characters gave 4,000 tokens when 500 were asked. Keep the most frequent
    (at most a quarter of the request: with their "##" forms, half, the rest for pieces). The
    trainer's own cut (limit_alphabet) breaks ties in hash order, other characters on every run,
    so the kept ones are chosen here, by count then character, and given as its initial alphabet."""
    limit = min(WORDPIECE_ALPHABET, (settings.vocab_size - len(BERT_SPECIALS)) // 4)
    normal = {ch: [c for c in backend.normalizer.normalize_str(ch) if not c.isspace()] for ch in chars}
    if len({c for cs in normal.values() for c in cs}) <= limit:
        return {}
    counts: Counter[str] = Counter()
    for ch, n in chars.items():  # (counted as the corpus was spooled: no second pass over it)
        for c in normal[ch]:
            counts[c] += n
    kept = sorted(counts, key=lambda c: (-counts[c], c))[:limit]
    return {"limit_alphabet": limit, "initial_alphabet": kept}


def _too_many_characters(backend: _Backend, path: Path, settings: TokenizerSettings, specials: int,
                         error: Exception | None = None) -> None:
    """Refuse a Unigram request smaller than the corpus's alphabet: its trainer keeps every
    character (it has no character_coverage as SentencePiece has), so it fails, or gives more tokens
    than asked. The characters are counted as the trainer saw them: normalized, words split."""
    seen: set[str] = set()
    for text in _documents(path):
        words = backend.pre_tokenizer.pre_tokenize_str(backend.normalizer.normalize_str(text))
        seen.update(*(w for w, _ in words))
    if not seen and error is not None:
        raise error
    raise BertkitError(f"the corpus has {len(seen):,} distinct characters (normalized, \u2581 included), and a "
                       f"Unigram vocabulary holds every one besides its {specials} special tokens: vocab_size must "
                       f"be at least {len(seen) + specials:,}, not {settings.vocab_size:,} (or train on text with "
                       "fewer characters)")


def _bpe_merges(backend: _Backend) -> list[tuple[str, str]]:
    import json

    merges = json.loads(backend.to_str())["model"]["merges"]
    return [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in merges]


def _unigram_pieces(backend: _Backend) -> list[tuple[str, float]]:
    import json

    return [tuple(p) for p in json.loads(backend.to_str())["model"]["vocab"]]
