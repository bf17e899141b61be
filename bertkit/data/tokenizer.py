"""Tokenizers, backed by Hugging Face's `tokenizers` library (Rust, fast, the same files).

A `Tokenizer` wraps a `tokenizers.Tokenizer` whose post-processor already adds the family's
special tokens, plus the metadata `transformers` keeps in tokenizer_config.json. Files it loads:
a checkpoint directory, tokenizer.json, BERT's vocab.txt (casing from tokenizer_config.json),
RoBERTa's vocab.json + merges.txt (byte-level BPE), DeBERTa-v3's spm.model and ALBERT's
spiece.model (SentencePiece Unigram models, read by the small protobuf reader in `spm.py`, so
bertkit needs no sentencepiece).
Each pipeline is assembled the way `transformers` assembles it from the same files, so the ids
agree (tests/test_tokenizer.py compares them). That includes which class reads them: most of the
families' transformers classes keep only the vocabulary of a tokenizer.json and rebuild the rest
from tokenizer_config.json (`tokenizer_class`, `REBUILDING_CLASSES`), so bertkit does the same.

The data pipeline tokenizes without special tokens (`encode_plain`) and adds them when examples
are framed (`Frame`), so one token cache serves every example layout of a family.
"""

from __future__ import annotations

import base64
import json
import os
import threading
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tokenizers import AddedToken, Regex
from tokenizers import Tokenizer as _Backend
from tokenizers import models, normalizers, pre_tokenizers, processors, decoders

from ..errors import BertkitError, first_line, outside_stacklevel
from ..files import read_json, read_plain, shown, text_lines

BERT_SPECIALS = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]",
                 "mask_token": "[MASK]"}
ROBERTA_SPECIALS = {"bos_token": "<s>", "eos_token": "</s>", "sep_token": "</s>", "cls_token": "<s>",
                    "unk_token": "<unk>", "pad_token": "<pad>", "mask_token": "<mask>"}
# DeBERTa v1's DebertaTokenizer has the same defaults as v2/v3's DebertaV2Tokenizer
DEBERTA_V3_SPECIALS = {"bos_token": "[CLS]", "eos_token": "[SEP]", "unk_token": "[UNK]", "sep_token": "[SEP]",
                       "pad_token": "[PAD]", "cls_token": "[CLS]", "mask_token": "[MASK]"}
ALBERT_SPECIALS = {"bos_token": "[CLS]", "eos_token": "[SEP]", "unk_token": "<unk>", "sep_token": "[SEP]",
                   "pad_token": "<pad>", "cls_token": "[CLS]", "mask_token": "[MASK]"}
GENERIC_TOKENIZER_CLASS = "PreTrainedTokenizerFast"  # transformers loads its tokenizer.json verbatim
NO_LIMIT = int(1e30)  # transformers' model_max_length when the files name none
SPM_CLASSES = {"AlbertTokenizer": "albert", "DebertaV2Tokenizer": "deberta-v3",  # tokenizer_class -> pipeline
               "XLMRobertaTokenizer": "xlm-roberta"}
SPECIAL_KEYS = ("unk_token", "sep_token", "pad_token", "cls_token", "mask_token", "bos_token", "eos_token")
PAD_SPELLINGS = ("[PAD]", "<pad>")  # the pad token of BERT-style and of RoBERTa / SentencePiece vocabularies
# the order in which transformers registers named special tokens (SPECIAL_TOKENS_ATTRIBUTES)
NAMING_ORDER = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
# transformers' setting that makes decode clean up a BPE tokenizer's text too (it does not otherwise)
FORCED_CLEAN_UP = "clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output"
# tokenizer_config.json's pipeline flags, kept so that `Tokenizer.save` writes them back
CONFIG_FLAGS = ("do_lower_case", "strip_accents", "tokenize_chinese_chars", "add_prefix_space", "trim_offsets",
                "split_by_punct", "keep_accents", "remove_space", "split_special_tokens", "padding_side",
                "truncation_side", "clean_up_tokenization_spaces", FORCED_CLEAN_UP)
# config.json's model_type -> the class transformers' AutoTokenizer builds when no file names one
# (TOKENIZER_MAPPING_NAMES in transformers/models/auto/tokenization_auto.py). ModernBERT is also in its
# MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS: its tokenizer.json is read as is, whatever the files name.
MODEL_TYPE_TOKENIZERS = {"bert": "BertTokenizer", "distilbert": "BertTokenizer", "electra": "BertTokenizer",
                         "roberta": "RobertaTokenizer", "xlm-roberta": "XLMRobertaTokenizer",
                         "camembert": "CamembertTokenizer",
                         "albert": "AlbertTokenizer", "deberta": "DebertaTokenizer",
                         "deberta-v2": "DebertaV2Tokenizer", "modernbert": "TokenizersBackend",
                         # models of other kinds whose tokenizer is BERT's or RoBERTa's (a folder that
                         # names no class: an old hub folder given as --tokenizer)
                         **dict.fromkeys(("mobilebert", "squeezebert", "layoutlm", "megatron-bert", "convbert"),
                                         "BertTokenizer"),
                         **dict.fromkeys(("longformer", "bart"), "RobertaTokenizer")}
# The transformers classes with their own __init__, and the tokenizers model each builds. From a tokenizer.json they
# take only the vocabulary (BPE's merges too, and the Precompiled charsmap for ALBERT) and rebuild normalizer,
# pre-tokenizer, decoder and post-processor from tokenizer_config.json, with the class's defaults where it is silent
# (convert_to_native_format in transformers/tokenization_utils_tokenizers.py). Any other class (TokenizersBackend,
# PreTrainedTokenizerFast) reads tokenizer.json as is. ElectraTokenizer is v5's alias of BertTokenizer, and
# DistilBertTokenizer only restates do_lower_case=True.
# The inputs transformers' classes return unless told, where they differ from its default (input_ids,
# attention_mask: RoBERTa, DistilBERT, ALBERT, XLM-R, a generic tokenizer.json)
CLASS_INPUT_NAMES = {"BertTokenizer": ("input_ids", "token_type_ids", "attention_mask"),
                     "ElectraTokenizer": ("input_ids", "token_type_ids", "attention_mask"),
                     "DebertaTokenizer": ("input_ids", "attention_mask", "token_type_ids"),
                     "DebertaV2Tokenizer": ("input_ids", "attention_mask", "token_type_ids")}
REBUILDING_CLASSES = {"BertTokenizer": "WordPiece", "DistilBertTokenizer": "WordPiece", "ElectraTokenizer": "WordPiece",
                      "RobertaTokenizer": "BPE", "DebertaTokenizer": "BPE",
                      "DebertaV2Tokenizer": "Unigram", "AlbertTokenizer": "Unigram", "XLMRobertaTokenizer": "Unigram",
                      "CamembertTokenizer": "Unigram"}
# Where [CLS] A [SEP] B [SEP] puts a pair: BERT's segment ids 0 then 1; DeBERTa v1 (DebertaTokenizer) uses
# RoBERTa's double separator and segment 0 throughout
BERT_PAIR = "{cls}:0 $A:0 {sep}:0 $B:1 {sep}:1"
DEBERTA_PAIR = "{cls}:0 $A:0 {sep}:0 {sep}:0 $B:0 {sep}:0"
METASPACE = "\u2581"  # SentencePiece's word-boundary mark
BYTE_LEVEL_SPACE = "\u0120"  # "Ġ": GPT-2's byte-level picture of a space


@dataclass(frozen=True)
class Frame:
    """Where a family's special tokens go around one or two token sequences, read from the
    tokenizer's post-processor: BERT [CLS] A [SEP] B [SEP] (types 0..0 1..1), RoBERTa
    <s> A </s></s> B </s> (all type 0). Each part is a tuple of (special id or "A"/"B", type id)."""

    single: tuple[tuple[int | str, int], ...]
    pair: tuple[tuple[int | str, int], ...]

    def specials(self, pair: bool) -> int:
        """How many special tokens a framed example carries: the length budget of its text is
        max_length minus this."""
        return sum(1 for p, _ in (self.pair if pair else self.single) if not isinstance(p, str))

    def apply(self, a: np.ndarray, b: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(ids, type ids) of the framed example, as int64 arrays."""
        parts, types = [], []
        for piece, type_id in (self.single if b is None else self.pair):
            seq = a if piece == "A" else b if piece == "B" else np.array([piece], dtype=np.int64)
            parts.append(np.asarray(seq, dtype=np.int64))
            types.append(np.full(len(seq), type_id, dtype=np.int64))
        return np.concatenate(parts), np.concatenate(types)


class Encoded(dict):
    """A tokenized batch by name (tensors, arrays or lists), with transformers' BatchEncoding's
    .to(device) and each row's word_ids, sequence_ids and tokens, padding included."""

    def __init__(self, values: dict, encodings: list | None = None, length: int | None = None, left: bool = False,
                 pad_token: str | None = None):
        super().__init__(values)
        self._encodings, self._length, self._left, self._pad_token = encodings or [], length, left, pad_token

    def to(self, device, non_blocking: bool = False) -> Encoded:
        """Moves the tensors in place and returns the batch itself, as transformers' does."""
        for k, v in self.items():
            if isinstance(v, torch.Tensor):
                self[k] = v.to(device, non_blocking=non_blocking)
        return self

    def _padded(self, batch_index: int, key: str, pad) -> list:
        if not isinstance(batch_index, int) or not 0 <= batch_index < len(self._encodings):
            raise BertkitError(f"batch_index {batch_index!r} is not a row of this batch of {len(self._encodings)}")
        row = list(getattr(self._encodings[batch_index], key))
        padding = [pad] * ((self._length or len(row)) - len(row))
        return padding + row if self._left else row + padding

    def word_ids(self, batch_index: int = 0) -> list[int | None]:
        """Each position's word of its text, None at special tokens and padding, as transformers'
        word_ids gives it: a word's sub-words share its index (to label only a word's first
        sub-word, say). With is_split_into_words the words are the given ones."""
        return self._padded(batch_index, "word_ids", None)

    def sequence_ids(self, batch_index: int = 0) -> list[int | None]:
        """Each position's part: 0 the text, 1 its pair, None special tokens and padding."""
        return self._padded(batch_index, "sequence_ids", None)

    def tokens(self, batch_index: int = 0) -> list[str]:
        """Each position's token string, the pad token's at padding."""
        return self._padded(batch_index, "tokens", self._pad_token)


class Tokenizer:
    """A family's tokenizer (a Hugging Face `tokenizers` pipeline, its named special tokens and
    tokenizer_config.json settings). `tokenizer(texts, text_pairs, max_length=...)` gives a
    padded batch of input_ids / attention_mask / token_type_ids; `encode(text, text_pair)` the ids
    transformers' encode gives; `decode(ids)` the text; `save(directory, tokenizer_class,
    model_max_length)` the files transformers' AutoTokenizer reads. transformers' names work too:
    tokenize, convert_tokens_to_ids, convert_ids_to_tokens, batch_decode, model_max_length,
    save_pretrained, and the batch's .to(device). Load one with `bertkit.load_tokenizer(path)`."""

    tokenizer_class: str | None = None  # the transformers class its files named, if any (load_tokenizer)
    is_fast = True  # what transformers' collators read of a tokenizer: a fast (Rust) one

    def __init__(self, backend: _Backend, special_tokens: dict[str, str], config: dict | None = None):
        self.backend = backend
        self.backend.no_padding()
        self.backend.no_truncation()
        self.special_tokens = dict(special_tokens)
        self.config = dict(config or {})  # extra tokenizer_config.json fields (e.g. do_lower_case)
        # split_special_tokens: "[MASK]" typed in a text is text, as transformers reads it then
        self.backend.encode_special_tokens = self.config.get("split_special_tokens") is True
        self._frame: Frame | None = None
        self._continues: np.ndarray | None = None
        # tokens the tokenizer's files list as special that the pipeline reads as ordinary added
        # tokens (a legacy added_tokens.json's): special to the masks and lists, as in transformers
        self.listed_specials: list[str] = []
        # the folder's own vocabulary files (spm.model, vocab.json ...), written back as they were,
        # as transformers' save copies a loaded tokenizer's vocab_file for tools that read it
        self.source_files: dict[str, bytes] = {}
        # Truncation is a setting of the shared backend, on for the length of one __call__: every
        # encoding call holds this lock, so a call in another thread neither sees nor undoes it.
        self._lock = threading.Lock()

    def __getstate__(self) -> dict:
        """Pickling and deepcopy: a lock is neither (a fresh one is made); the caches are left out,
        so the pickle, and datasets' fingerprint of a map over it, is the same before and after use."""
        return {k: v for k, v in self.__dict__.items() if k not in ("_lock", "_frame", "_continues")}

    def __setstate__(self, state: dict) -> None:
        # (a tokenizer pickled before had no listed_specials, and one pickled earlier still its caches)
        self.__dict__.update({"listed_specials": [], **state, "_frame": None, "_continues": None})
        self._lock = threading.Lock()
        self.backend.encode_special_tokens = self.config.get("split_special_tokens") is True  # not pickled

    # ---- special tokens -------------------------------------------------------------------
    def _special_id(self, key: str) -> int | None:
        token = self.special_tokens.get(key)
        return None if token is None else self.backend.token_to_id(token)

    @property
    def pad_token_id(self) -> int:
        """The named pad token's id; without one (a bare tokenizer.json, or tokenizer_config.json's
        pad_token: null), a token spelled as the families spell padding, else 0: batches still pad
        (attention_mask 0 there), where transformers refuses. RoBERTa's <pad> is 1, and padding with
        its 0 (<s>) would write a real token id into pad positions."""
        pad = self._special_id("pad_token")
        if pad is None:
            pad = next((i for i in map(self.backend.token_to_id, PAD_SPELLINGS) if i is not None), 0)
        return pad

    def _named_token(key: str) -> property:  # noqa: N805  (builds the properties below)
        """transformers' `<key>` attribute: the named token's string (None where the tokenizer
        names none); setting it names another token of the vocabulary, None names none."""
        def set_token(self, token: str | None) -> None:
            if token is None:
                self.special_tokens.pop(key, None)
                return
            if not isinstance(token, str) or self.backend.token_to_id(token) is None:
                raise BertkitError(f"{key}: {token!r} is not a token of this vocabulary")
            self.special_tokens[key] = token

        return property(lambda self: self.special_tokens.get(key), set_token)

    mask_token = _named_token("mask_token")
    pad_token = _named_token("pad_token")
    cls_token = _named_token("cls_token")
    sep_token = _named_token("sep_token")
    unk_token = _named_token("unk_token")
    bos_token = _named_token("bos_token")
    eos_token = _named_token("eos_token")
    del _named_token

    # transformers' names for the other named tokens' ids (None where the tokenizer names none)
    mask_token_id = property(lambda self: self._special_id("mask_token"))
    cls_token_id = property(lambda self: self._special_id("cls_token"))
    sep_token_id = property(lambda self: self._special_id("sep_token"))
    unk_token_id = property(lambda self: self._special_id("unk_token"))
    bos_token_id = property(lambda self: self._special_id("bos_token"))
    eos_token_id = property(lambda self: self._special_id("eos_token"))

    @property
    def vocab_size(self) -> int:
        """The vocabulary without the tokens added to it (transformers' vocab_size); len() counts
        every id, added tokens too: size a model's embeddings by len()."""
        return self.backend.get_vocab_size(with_added_tokens=False)

    def get_vocab(self) -> dict[str, int]:
        """{token: id} for every token, added ones too."""
        return self.backend.get_vocab(with_added_tokens=True)

    @property
    def all_special_tokens(self) -> list[str]:
        """Every special token, as transformers lists them: the named ones (in its order of names),
        then the others (added as special, or listed so by the files), as spelled where added."""
        named = [self.special_tokens[k] for k in NAMING_ORDER if k in self.special_tokens]
        added = [t.content for _, t in sorted(self.backend.get_added_tokens_decoder().items()) if t.special]
        return list(dict.fromkeys(named + added + self.listed_specials))

    @property
    def all_special_ids(self) -> list[int]:
        """The ids of all_special_tokens, in its order (special_ids is the same set, sorted)."""
        return [self.backend.token_to_id(t) for t in self.all_special_tokens]

    @property
    def special_ids(self) -> list[int]:
        """Every special token's id (the named ones and any other added special token): the
        positions a masking collator must never choose or sample as a replacement."""
        ids = {self._special_id(k) for k in self.special_tokens}
        ids |= {i for i, t in self.backend.get_added_tokens_decoder().items() if t.special}
        ids |= {self.backend.token_to_id(t) for t in self.listed_specials}
        return sorted(i for i in ids if i is not None)

    # ---- encoding -------------------------------------------------------------------------
    def encode(self, text: str, text_pair: str | None = None, add_special_tokens: bool = True) -> list[int]:
        """Ids with the family's special tokens (without them if not `add_special_tokens`), like
        `transformers`' `encode` (which, like this, treats an empty `text_pair` as no pair)."""
        _check_text_and_pair(text, text_pair)
        with self._lock:
            return self.backend.encode(text, text_pair or None, add_special_tokens=add_special_tokens).ids

    def encode_plain(self, texts: list[str]) -> list[list[int]]:
        """Ids without special tokens, one list per text; `tokenizers` spreads the batch over
        all cores (unless TOKENIZERS_PARALLELISM=false)."""
        with self._lock:
            return [e.ids for e in self.backend.encode_batch(texts, add_special_tokens=False)]

    def __call__(self, texts: list[str] | str | None = None, text_pairs: list[str] | str | None = None,
                 max_length: int | None = None, *, padding: bool | str = True, truncation: bool | str | None = None,
                 return_tensors: str | None = "pt", padding_side: str | None = None, add_special_tokens: bool = True,
                 text: list[str] | str | None = None, text_pair: list[str] | str | None = None,
                 is_split_into_words: bool = False, return_offsets_mapping: bool = False,
                 return_special_tokens_mask: bool = False, return_token_type_ids: bool | None = None,
                 return_attention_mask: bool | None = None, return_overflowing_tokens: bool = False,
                 stride: int = 0, pad_to_multiple_of: int | None = None) -> Encoded:
        """A right-padded batch: input_ids, attention_mask, token_type_ids, each (B, T) int64.
        Longer inputs are truncated to max_length (the longest part first, for pairs), which
        must leave room for a token of text beside the special tokens. One text (and its pair)
        may be given as strings. transformers' keywords mean what they mean there: `padding`
        True / "longest" (the default here), "max_length" (to max_length) or False (no padding:
        lists, or tensors if the rows are of one length); `truncation` True / "longest_first",
        "only_first", "only_second" (to max_length, else the tokenizer's model_max_length) or
        False (max_length then only pads); `return_tensors` "pt", "np" or None (lists). A
        tokenizer_config.json with padding_side / truncation_side "left" pads before the tokens and
        cuts from the start, as transformers does; `padding_side` "left" / "right" overrides it
        for one call, as transformers' keyword does. `text` / `text_pair` are transformers' names
        for `texts` / `text_pairs`; `add_special_tokens=False` leaves the special tokens out. One
        text given as a string with return_tensors=None comes back as one row's lists, as
        transformers gives it. `is_split_into_words`: each text is a list of words (one text: one
        list), tokenized word by word. `return_offsets_mapping` adds each token's (start, end)
        characters in its text ((0, 0) at special tokens and padding; in its word, for words),
        `return_special_tokens_mask` 1 at special tokens and padding; token_type_ids and
        attention_mask come back when model_input_names name them (all three unless the files say
        otherwise), or as `return_token_type_ids` / `return_attention_mask` say. The batch's
        word_ids(i), sequence_ids(i) and tokens(i) give row i's, as transformers' BatchEncoding
        does. `return_overflowing_tokens`
        keeps what truncation cuts as further rows (windows overlapping by `stride` tokens, as a
        QA context is read), with "overflow_to_sample_mapping": each row's input. `pad_to_multiple_of`
        rounds the padded length up. Lists (return_tensors=None) padded to "max_length" pad each
        row to it, a longer row staying as long, as transformers' do."""
        for ours, theirs, name in ((texts, text, "texts"), (text_pairs, text_pair, "text_pairs")):
            if ours is not None and theirs is not None:
                raise BertkitError(f"give {name} or {name[:-1]}, not both")
        texts = texts if texts is not None else text
        text_pairs = text_pairs if text_pairs is not None else text_pair
        if texts is None:
            raise BertkitError("no text given")
        if is_split_into_words:  # one text is a list of words, a batch a list of them
            one = isinstance(texts, (list, tuple)) and bool(texts) and all(isinstance(w, str) for w in texts)
            texts, text_pairs = ([texts], None if text_pairs is None else [text_pairs]) if one else (texts, text_pairs)
            _check_word_lists(texts, "texts")
            if text_pairs is not None:
                _check_word_lists(text_pairs, "text_pairs")
        else:
            one = isinstance(texts, str)
            if isinstance(texts, str):
                texts = [texts]
            if isinstance(text_pairs, str):  # one pair, as tokenizer("a text", "its pair")
                text_pairs = [text_pairs]
            _check_strings(texts, "texts")
            if text_pairs is not None:
                _check_strings(text_pairs, "text_pairs")
        if text_pairs is not None and len(text_pairs) != len(texts):
            raise BertkitError(f"{len(texts)} texts but {len(text_pairs)} text pairs")
        padding = {True: "longest", False: "do_not_pad"}.get(padding, padding)
        if padding not in ("longest", "max_length", "do_not_pad"):
            raise BertkitError(f"padding must be True, False, 'longest', 'max_length' or 'do_not_pad', got {padding!r}")
        if padding_side not in (None, "left", "right"):
            raise BertkitError(f"padding_side must be 'left' or 'right', got {padding_side!r}")
        if return_tensors not in ("pt", "np", None):
            raise BertkitError(f"return_tensors must be 'pt', 'np' or None, got {return_tensors!r}")
        strategy = {None: "longest_first" if max_length is not None else None, True: "longest_first",
                    False: None, "do_not_truncate": None}.get(truncation, truncation)
        if strategy not in (None, "longest_first", "only_first", "only_second"):
            raise BertkitError(f"truncation must be True, False, 'longest_first', 'only_first' or 'only_second', "
                               f"got {truncation!r}")
        if strategy == "only_second" and text_pairs is None:
            raise BertkitError("truncation='only_second' needs text pairs")
        if strategy is not None and max_length is None:
            max_length = self.config.get("model_max_length")
            if max_length is None:
                raise BertkitError("truncation needs max_length (this tokenizer names no model_max_length)")
            if max_length > 2**31:  # transformers' "no limit" (int(1e30)): nothing to cut at
                max_length, strategy = None, None
        if padding == "max_length" and max_length is None:  # transformers pads to model_max_length then
            max_length = self.config.get("model_max_length")
            if max_length is None or max_length > 2**31:
                raise BertkitError("padding='max_length' needs max_length (this tokenizer names no model_max_length)")
        if strategy is not None:
            specials = self.frame.specials(pair=text_pairs is not None) if add_special_tokens else 0
            least = specials + (1 if text_pairs is None else 2)
            if not isinstance(max_length, int) or max_length < least:
                raise BertkitError(f"max_length must be a whole number of at least {least} (the special tokens and "
                                   f"a token of each text), got {max_length!r}")
        if not isinstance(stride, int) or isinstance(stride, bool) or stride < 0:
            raise BertkitError(f"stride must be a whole number of tokens, at least 0, got {stride!r}")
        _check_multiple(pad_to_multiple_of)
        if pad_to_multiple_of and strategy is not None and padding != "do_not_pad" and max_length % pad_to_multiple_of:
            raise BertkitError(f"truncation to max_length {max_length} and padding to a multiple of "
                               f"{pad_to_multiple_of} disagree: give a max_length that is a multiple of it")
        inputs = list(zip(texts, text_pairs)) if text_pairs is not None else list(texts)
        with self._lock:
            try:
                if strategy is not None:
                    self.backend.enable_truncation(max_length, stride=stride, strategy=strategy,
                                                   direction=self._side("truncation_side"))
                encodings = self.backend.encode_batch(inputs, is_pretokenized=is_split_into_words,
                                                      add_special_tokens=add_special_tokens)
            except Exception as e:  # only_first / only_second with no room left in that part, a stride too long
                raise BertkitError(f"could not truncate to max_length {max_length}: {e}") from None
            finally:
                self.backend.no_truncation()
        mapping = None
        if return_overflowing_tokens:  # each input's windows as rows of their own, in order
            mapping = [i for i, e in enumerate(encodings) for _ in range(1 + len(e.overflowing))]
            encodings, one = [w for e in encodings for w in (e, *e.overflowing)], False
        told = {"attention_mask": return_attention_mask, "token_type_ids": return_token_type_ids}
        asked = {"input_ids": True, **{k: k in self.model_input_names if v is None else v for k, v in told.items()},
                 "special_tokens_mask": return_special_tokens_mask, "offset_mapping": return_offsets_mapping}
        rows = {k: [ROW_VALUES[k](e) for e in encodings] for k, wanted in asked.items() if wanted}
        lengths = {len(e.ids) for e in encodings}
        left = (padding_side or self._side("padding_side")) == "left"
        if padding == "do_not_pad" and (return_tensors is None or len(lengths) > 1):
            if return_tensors is not None:
                raise BertkitError(f"the texts have {len(lengths)} different lengths: tensors need padding "
                                   "(padding=True), or return_tensors=None for lists")
            rows = {k: [_listed(k, row) for row in v] for k, v in rows.items()}
            rows = {k: v[0] for k, v in rows.items()} if one else rows
            if mapping is not None:
                rows["overflow_to_sample_mapping"] = mapping
            return Encoded(rows, encodings, None, left, self.pad_token)
        target = max(lengths, default=0) if padding != "max_length" else max_length
        if pad_to_multiple_of and padding != "do_not_pad":  # (rows of one length, as tensors: not padded)
            target = -(-target // pad_to_multiple_of) * pad_to_multiple_of
        T = max([target, *lengths])
        pads = {**self.PADDED, "input_ids": self.pad_token_id}
        batch = {}
        for key, values in rows.items():  # (B, T), offsets (B, T, 2)
            batch[key] = torch.full((len(encodings), T, 2) if key == "offset_mapping" else (len(encodings), T),
                                    pads[key], dtype=torch.long)
            for i, row in enumerate(values):
                if row:
                    batch[key][i, slice(T - len(row), T) if left else slice(0, len(row))] = torch.tensor(row)
        if mapping is not None:
            batch["overflow_to_sample_mapping"] = torch.tensor(mapping, dtype=torch.long)
        if return_tensors is None:
            widths = [max(target, len(e.ids)) for e in encodings]  # (each row's own, for "max_length")
            batch = {k: [_listed(k, row[T - n:] if left else row[:n]) for row, n in zip(v.tolist(), widths)]
                     if v.dim() > 1 else v.tolist() for k, v in batch.items()}
            batch = {k: v[0] for k, v in batch.items()} if one else batch
        elif return_tensors == "np":
            batch = {k: v.numpy() for k, v in batch.items()}
        return Encoded(batch, encodings, T, left, self.pad_token)

    # what pad() (and a call) pads, and with what: the rest of a feature's keys (a label ...) pass through
    PADDED = {"input_ids": None, "attention_mask": 0, "token_type_ids": 0, "special_tokens_mask": 1,
              "offset_mapping": 0}

    def pad(self, encoded_inputs, padding: bool | str = True, max_length: int | None = None,
            pad_to_multiple_of: int | None = None, padding_side: str | None = None,
            return_attention_mask: bool | None = None, return_tensors: str | None = None) -> dict:
        """Pad already-encoded examples into a batch, as transformers' `pad` does (and so as its
        data collators call it): a list of feature dicts or a dict of lists, each with input_ids;
        padding True / "longest", "max_length" (to max_length) or False; lengths rounded up to
        `pad_to_multiple_of`; input_ids padded with the pad id, attention_mask (made when missing,
        unless return_attention_mask=False) and token_type_ids with 0, special_tokens_mask with 1.
        Other keys (labels) pass through unpadded; tensors ("pt", "np") need them of one length."""
        if isinstance(encoded_inputs, (list, tuple)):
            if not encoded_inputs or not all(isinstance(f, dict) for f in encoded_inputs):
                raise BertkitError("pad takes a non-empty list of feature dicts or a dict of lists")
            encoded_inputs = {k: [f[k] for f in encoded_inputs] for k in encoded_inputs[0]}
        if not isinstance(encoded_inputs, dict) or "input_ids" not in encoded_inputs:
            raise BertkitError("pad needs features with input_ids")
        ids = encoded_inputs["input_ids"]
        one = getattr(ids, "ndim", None) == 1 or (len(ids) > 0 and isinstance(ids[0], (int, np.integer)))
        if one:  # a single example's ids
            encoded_inputs = {k: [v] for k, v in encoded_inputs.items()}
        rows = {k: [list(v.tolist() if hasattr(v, "tolist") else v) for v in values] if k in self.PADDED else
                list(values) for k, values in encoded_inputs.items()}
        if return_attention_mask is not False and "attention_mask" not in rows:
            rows["attention_mask"] = [[1] * len(ids) for ids in rows["input_ids"]]
        elif return_attention_mask is False:
            rows.pop("attention_mask", None)
        padding = {True: "longest", False: "do_not_pad"}.get(padding, padding)
        if padding not in ("longest", "max_length", "do_not_pad"):
            raise BertkitError(f"padding must be True, False, 'longest', 'max_length' or 'do_not_pad', got {padding!r}")
        if padding == "max_length" and max_length is None:
            raise BertkitError("padding='max_length' needs max_length")
        _check_multiple(pad_to_multiple_of)
        if padding != "do_not_pad":
            target = max_length if padding == "max_length" else max(map(len, rows["input_ids"]))
            if pad_to_multiple_of:
                target = -(-target // pad_to_multiple_of) * pad_to_multiple_of
            left = (padding_side or self._side("padding_side")) == "left"
            for key, fill in self.PADDED.items():
                fill = self.pad_token_id if fill is None else fill
                if key in rows:
                    rows[key] = [([fill] * (target - len(r)) + r if left else r + [fill] * (target - len(r)))
                                 if len(r) < target else r for r in rows[key]]
        if one:
            rows = {k: v[0] for k, v in rows.items()}
        if return_tensors is None:
            return rows
        if return_tensors not in ("pt", "np"):
            raise BertkitError(f"return_tensors must be 'pt', 'np' or None, got {return_tensors!r}")
        try:
            arrays = {k: np.asarray(v) for k, v in rows.items()}
            if any(a.dtype == object for a in arrays.values()):
                raise ValueError
        except ValueError:
            raise BertkitError("these features have rows of different lengths: tensors need padding") from None
        return arrays if return_tensors == "np" else Encoded(
            {k: torch.from_numpy(a) for k, a in arrays.items()})

    def get_special_tokens_mask(self, token_ids_0, token_ids_1=None, already_has_special_tokens: bool = False
                                ) -> list[int]:
        """1 at each special token, 0 at each text token: of ids that already hold them
        (`already_has_special_tokens`), else of the sequence(s) once framed by the family's special
        tokens, as transformers' gives it (its MLM collator masks by it)."""
        if already_has_special_tokens:
            if token_ids_1 is not None:
                raise BertkitError("ids that already hold special tokens are one sequence: give no token_ids_1")
            special = set(self.special_ids)
            ids = token_ids_0.tolist() if hasattr(token_ids_0, "tolist") else token_ids_0
            return [int(i in special) for i in ids]
        parts = self.frame.single if token_ids_1 is None else self.frame.pair
        return [m for piece, _ in parts for m in ([0] * len(token_ids_0) if piece == "A" else
                                                  [0] * len(token_ids_1) if piece == "B" else [1])]

    def _side(self, key: str) -> str:
        side = self.config.get(key, "right")
        if side not in ("left", "right"):
            raise BertkitError(f"tokenizer_config.json: {key} must be 'left' or 'right', got {side!r}")
        return side

    def encode_offsets(self, texts: list[str]) -> list[tuple[list[int], list[tuple[int, int]]]]:
        """For each text, its ids without special tokens and each token's (start, end) character
        span in the text: how fine-tuning tasks (tasks/) find the first sub-word of each word and
        map a predicted QA token span back to the exact characters of its context."""
        with self._lock:
            return [(e.ids, e.offsets) for e in self.backend.encode_batch(texts, add_special_tokens=False)]

    def decode(self, ids, skip_special_tokens: bool = False, clean_up_tokenization_spaces: bool | None = None) -> str:
        """The text of `ids` (one id, a list, a NumPy array or a 1-D tensor; rows of them give a
        list of texts, as transformers 5 gives them); special tokens (and padding) are kept unless
        `skip_special_tokens`, as transformers' decode keeps them. `clean_up_tokenization_spaces`
        (by default tokenizer_config.json's, else False) joins "hello , world" into "hello,
        world" as transformers does, except for a BPE tokenizer, as there."""
        if hasattr(ids, "tolist"):
            ids = ids.tolist()
        if isinstance(ids, int):
            ids = [ids]
        if ids and isinstance(ids[0], list):
            return self.batch_decode(ids, skip_special_tokens, clean_up_tokenization_spaces)
        text = self.backend.decode(ids, skip_special_tokens=skip_special_tokens)
        if clean_up_tokenization_spaces is None:
            clean_up_tokenization_spaces = self.config.get("clean_up_tokenization_spaces", False)
        if clean_up_tokenization_spaces and (not isinstance(self.backend.model, models.BPE)
                                             or self.config.get(FORCED_CLEAN_UP)):
            for spaced, joined in CLEAN_UPS:
                text = text.replace(spaced, joined)
        return text

    def id_to_token(self, i: int) -> str | None:
        return self.backend.id_to_token(i)

    # transformers' names for the same, for code written against its tokenizers
    def batch_decode(self, sequences, skip_special_tokens: bool = False,
                     clean_up_tokenization_spaces: bool | None = None) -> list[str]:
        """The text of each row of ids (a list of lists, or a (B, T) tensor or array)."""
        return [self.decode(ids, skip_special_tokens, clean_up_tokenization_spaces) for ids in sequences]

    def convert_ids_to_tokens(self, ids):
        """The vocabulary entry of an id, or of each id of a list."""
        if hasattr(ids, "tolist"):
            ids = ids.tolist()
        return self.id_to_token(ids) if isinstance(ids, int) else [self.id_to_token(i) for i in ids]

    def convert_tokens_to_ids(self, tokens):
        """The id of a vocabulary entry, or of each of a list; an entry the vocabulary lacks is the
        unknown token's id (None without one), as transformers gives it."""
        def one(token):
            if not isinstance(token, str):
                raise BertkitError(f"tokens must be strings, not {type(token).__name__}")
            found = self.backend.token_to_id(token)
            return self.unk_token_id if found is None else found

        return one(tokens) if isinstance(tokens, str) else [one(t) for t in tokens]

    def tokenize(self, text: str, text_pair: str | None = None, add_special_tokens: bool = False) -> list[str]:
        """The tokens of a text (and its pair), without the special tokens unless asked: what
        transformers' tokenize gives."""
        _check_text_and_pair(text, text_pair)
        with self._lock:
            return self.backend.encode(text, text_pair or None, add_special_tokens=add_special_tokens).tokens

    @property
    def model_max_length(self) -> int:
        """The longest input the tokenizer's files name (tokenizer_config.json); transformers'
        "no limit", int(1e30), where they name none."""
        return self.config.get("model_max_length", NO_LIMIT)

    @model_max_length.setter
    def model_max_length(self, length: int) -> None:
        if isinstance(length, bool) or not isinstance(length, int) or length < 1:
            raise BertkitError(f"model_max_length must be a positive whole number, got {length!r}")
        self.config["model_max_length"] = length

    def _side_setting(key: str) -> property:  # noqa: N805  (builds the two properties below)
        """transformers' padding_side / truncation_side attribute, kept in the tokenizer_config
        settings that calls read (and a save writes)."""
        def set_side(self, side: str) -> None:
            if side not in ("left", "right"):
                raise BertkitError(f"{key} must be 'left' or 'right', got {side!r}")
            self.config[key] = side

        return property(lambda self: self._side(key), set_side)

    padding_side = _side_setting("padding_side")
    truncation_side = _side_setting("truncation_side")
    del _side_setting

    def save_pretrained(self, directory: str | Path) -> list[Path]:
        """`save` under transformers' name, for the tokenizer alone: its own transformers class
        (the one its files named; a generic one for a trained tokenizer) and model_max_length.
        A model's save_pretrained writes its tokenizer for the model's family instead."""
        return self.save(directory, self.tokenizer_class or GENERIC_TOKENIZER_CLASS, self.model_max_length)

    def __len__(self) -> int:
        return self.backend.get_vocab_size(with_added_tokens=True)

    def __repr__(self) -> str:
        length = self.model_max_length
        return (f"Tokenizer({type(self.backend.model).__name__}, {len(self):,} tokens, "
                f"{self.tokenizer_class or 'trained by bertkit'}, model_max_length "
                f"{length if length < NO_LIMIT else 'none'}, padding {self.padding_side}, "
                f"truncation {self.truncation_side}, special {self.special_tokens})")

    @property
    def model_input_names(self) -> list[str]:
        """The inputs the model takes, as tokenizer_config.json names them (kept when saved), else as
        the transformers class its files name has them (RoBERTa's, DistilBERT's, ALBERT's and a generic
        one's take no token_type_ids), else all three (a tokenizer bertkit trained). A call returns
        these unless told; transformers' Trainer reads the first."""
        if "model_input_names" in self.config:
            return list(self.config["model_input_names"])
        if self.tokenizer_class is None:
            return ["input_ids", "token_type_ids", "attention_mask"]
        return list(CLASS_INPUT_NAMES.get(self.tokenizer_class, ("input_ids", "attention_mask")))

    @property
    def added_tokens_decoder(self) -> dict[int, AddedToken]:
        """The tokens added to the vocabulary (special ones included) by id, as transformers has it."""
        return dict(sorted(self.backend.get_added_tokens_decoder().items()))

    @property
    def added_tokens_encoder(self) -> dict[str, int]:
        """The added tokens' ids by content, as transformers has it."""
        return {t.content: i for i, t in self.added_tokens_decoder.items()}

    def get_added_vocab(self) -> dict[str, int]:
        return self.added_tokens_encoder

    @property
    def special_tokens_map(self) -> dict[str, str]:
        """The named special tokens, as transformers' special_tokens_map gives them."""
        return dict(self.special_tokens)

    def num_special_tokens_to_add(self, pair: bool = False) -> int:
        """How many special tokens frame one text (or a pair), as run_mlm-style scripts ask."""
        return self.frame.specials(pair=pair)

    def convert_tokens_to_string(self, tokens: list[str]) -> str:
        """The text of a list of token strings (the decoder's joining: "##" pieces, "Ġ", "▁")."""
        return self.backend.decoder.decode(tokens) if self.backend.decoder is not None else " ".join(tokens)

    # ---- tokens added after training -------------------------------------------------------
    def add_tokens(self, new_tokens, special_tokens: bool = False) -> int:
        """Append tokens to the vocabulary, as transformers' add_tokens: a string or tokenizers'
        AddedToken (for its flags), or a list of them; returns how many it registers (a word
        already in the vocabulary counts once, as there, but gets no new id). An added token
        is never split; a special one is also dropped by decode(skip_special_tokens=True) and
        masked by get_special_tokens_mask. The model needs rows for them next:
        model.resize_token_embeddings(len(tokenizer)). Saved with the tokenizer."""
        tokens = [new_tokens] if isinstance(new_tokens, (str, AddedToken)) else new_tokens
        if not isinstance(tokens, (list, tuple)) or not all(
                isinstance(t, AddedToken) or (isinstance(t, str) and t) for t in tokens):
            raise BertkitError("add_tokens takes a token (a non-empty string or an AddedToken) or a list of them")
        with self._lock:
            self._continues = None  # (its table is by id)
            return (self.backend.add_special_tokens if special_tokens else self.backend.add_tokens)(list(tokens))

    def add_special_tokens(self, special_tokens_dict: dict) -> int:
        """Name special tokens, as transformers' add_special_tokens: {"pad_token": "[PAD]", ...}
        for the named ones, {"additional_special_tokens": [...]} (or extra_special_tokens) for
        others; tokens not in the vocabulary are appended. Returns how many it registers."""
        if not isinstance(special_tokens_dict, dict):
            raise BertkitError("add_special_tokens takes a dict, e.g. {'additional_special_tokens': ['[E1]']}")
        extra_keys = ("additional_special_tokens", "extra_special_tokens")
        unknown = [k for k in special_tokens_dict if k not in SPECIAL_KEYS and k not in extra_keys]
        if unknown:
            raise BertkitError(f"unknown special token key {unknown[0]!r}; known: "
                               f"{', '.join(SPECIAL_KEYS + extra_keys)}")
        named = next((k for k in SPECIAL_KEYS if k in special_tokens_dict and not isinstance(
            special_tokens_dict[k], (str, AddedToken))), None)
        if named is not None:
            raise BertkitError(f"{named} must be one token (a string or an AddedToken), "
                               f"got {special_tokens_dict[named]!r}")
        added = 0
        for key, value in special_tokens_dict.items():
            added += self.add_tokens(value, special_tokens=True)
            if key in SPECIAL_KEYS:
                setattr(self, key, value.content if isinstance(value, AddedToken) else value)
        return added

    def _pairs_have_segments(self) -> bool:
        """Whether a pair's framing gives some token a segment id other than 0."""
        try:
            return any(type_id != 0 for _, type_id in self.frame.pair)
        except BertkitError:  # a post-processor the data pipeline does not read: transformers reads it as is
            return False

    # ---- what the data pipeline needs ------------------------------------------------------
    @property
    def frame(self) -> Frame:
        """The family's special-token layout, read once from the post-processor."""
        if self._frame is None:
            self._frame = _frame_of(self.backend)
        return self._frame

    @property
    def spaces_words(self) -> bool:
        """Whether a word's tokens hold the space before it (byte-level BPE: "Ġword" after a space,
        "word" at the start of a text)."""
        return isinstance(self.backend.model, models.BPE)

    def continues_word(self) -> np.ndarray:
        """(V,) bool: True where a token continues the word of the token before it, so whole-word
        masking can find words from ids alone (a cached corpus keeps no text). WordPiece (and a BPE
        with a continuing prefix) marks continuations with "##"; the pre-tokenizer of byte-level
        BPE and of SentencePiece (Unigram, or BPE in its Metaspace form) marks word *starts* (with
        "Ġ" / "▁"), so there a token without the mark continues a word. Special tokens never do.
        A vocabulary that marks neither (BPE with a "</w>" word-end suffix) is refused: its words
        cannot be told from ids alone."""
        if self._continues is None:
            model = self.backend.model
            vocab = self.backend.get_vocab(with_added_tokens=True)
            table = np.zeros(max(vocab.values(), default=-1) + 1, dtype=bool)
            prefix = getattr(model, "continuing_subword_prefix", None)
            if prefix:
                marked = [i for t, i in vocab.items() if t.startswith(prefix)]
                table[marked] = True
            else:
                start = _word_start_mark(json.loads(self.backend.to_str()).get("pre_tokenizer"))
                if start is None and isinstance(model, models.Unigram):  # SentencePiece's mark, put in by a
                    start = METASPACE                                      # normalizer (Llama-style files)
                if start is None:
                    raise BertkitError(f"whole-word masking cannot find words in this tokenizer's ids "
                                       f"({type(model).__name__} without a word-start mark or a continuation "
                                       "prefix); train without --whole-word")
                table[:] = True
                table[[i for t, i in vocab.items() if t.startswith(start)]] = False
            table[[i for i in self.special_ids if i < len(table)]] = False
            added = [i for i in self.backend.get_added_tokens_decoder()]
            table[[i for i in added if i < len(table)]] = False
            self._continues = table
        return self._continues

    def to_str(self) -> str:
        """The whole pipeline as JSON text: part of a token cache's key (with split_special_tokens,
        which the JSON leaves out)."""
        text = self.backend.to_str()
        return text + "\nsplit_special_tokens" if self.backend.encode_special_tokens else text

    # ---- files ----------------------------------------------------------------------------
    def save(self, directory: str | Path, tokenizer_class: str, model_max_length: int) -> list[Path]:
        """Write tokenizer.json, tokenizer_config.json and special_tokens_map.json (plus vocab.txt
        for WordPiece), the files `transformers.AutoTokenizer` reads. Returns the paths written."""
        directory = Path(directory)
        if directory.exists() and not directory.is_dir():
            raise BertkitError(f"{directory}: is a file, not a directory to save a tokenizer in")
        directory.mkdir(parents=True, exist_ok=True)
        written = [directory / "tokenizer.json", directory / "tokenizer_config.json",
                   directory / "special_tokens_map.json"]
        self.backend.save(str(written[0]))
        config = {**self.config, **self.special_tokens, "tokenizer_class": tokenizer_class,
                  "model_max_length": min(self.config.get("model_max_length", model_max_length), model_max_length)}
        # special tokens beyond the named ones (an entity marker ...): transformers lists them as
        # extra_special_tokens, which its special-token masks (and so its MLM collator) read
        named = set(self.special_tokens.values())
        extra = [t.content for _, t in sorted(self.backend.get_added_tokens_decoder().items())
                 if t.special and t.content not in named]
        extra += [t for t in self.listed_specials if t not in extra and t not in named]
        if extra:
            config["extra_special_tokens"] = extra
        # The class is declared only with settings from which transformers rebuilds this pipeline
        # (_rebuilds_alike); for ALBERT the do_lower_case/keep_accents that do so are searched for.
        # Otherwise the tokenizer is declared generic, and transformers reads tokenizer.json as is.
        choices = ([{**config, "do_lower_case": lower, "keep_accents": keep} for lower in (True, False)
                    for keep in (False, True)] if tokenizer_class == "AlbertTokenizer" else [config])
        config = next((c for c in choices if _rebuilds_alike(self.backend, tokenizer_class, c, self.special_tokens)),
                      {**config, "tokenizer_class": GENERIC_TOKENIZER_CLASS})
        if self.tokenizer_class is not None and "model_input_names" not in config:
            config["model_input_names"] = self.model_input_names  # what its files gave, whatever class it is saved as
        if config["tokenizer_class"] in (GENERIC_TOKENIZER_CLASS, "AlbertTokenizer") and self._pairs_have_segments() \
                and "model_input_names" not in config:
            # one bertkit trained: these classes (AlbertTokenizer too, in transformers 5) return no token_type_ids
            # unless told to, and a pair's second text would reach the model as segment 0 (an ALBERT pre-trained
            # with SOP on segment 1)
            config["model_input_names"] = ["input_ids", "token_type_ids", "attention_mask"]
        written[1].write_text(json.dumps(config, indent=2) + "\n")
        specials_map = {**self.special_tokens, **({"additional_special_tokens": extra} if extra else {})}
        written[2].write_text(json.dumps(specials_map, indent=2) + "\n")
        if isinstance(self.backend.model, models.WordPiece):
            vocab = self.backend.get_vocab(with_added_tokens=False)
            ordered = sorted(vocab, key=vocab.__getitem__)
            written.append(directory / "vocab.txt")
            written[-1].write_text("".join(t + "\n" for t in ordered), encoding="utf-8")
        for name, data in getattr(self, "source_files", {}).items():  # a tokenizer pickled before had none
            if directory / name not in written:
                written.append(directory / name)
                written[-1].write_bytes(data)
        return written


def _rebuilds_alike(backend: _Backend, cls: str, config: dict, specials: dict[str, str]) -> bool:
    """Whether transformers' class `cls`, rebuilding a pipeline around this backend's vocabulary from
    `config` (REBUILDING_CLASSES), gets this backend's normalizer, pre-tokenizer, decoder and
    post-processor back. A model's family names a class, but its tokenizer may be of another kind (a
    BERT encoder with XLM-R's Unigram tokenizer): declared as BertTokenizer, transformers would force
    the Unigram vocabulary into WordPiece and read nearly every word as [UNK]."""
    if cls not in REBUILDING_CLASSES:
        return True  # read as is
    if REBUILDING_CLASSES[cls] != type(backend.model).__name__:
        return False
    try:
        rebuilt, _ = _rebuilt(backend, cls, config, dict(specials))
    except BertkitError:  # e.g. the class's special tokens are not in this vocabulary
        return False
    ours, theirs = json.loads(backend.to_str()), json.loads(rebuilt.to_str())
    return all(ours.get(k) == theirs.get(k) for k in ("normalizer", "pre_tokenizer", "decoder", "post_processor"))


def _precompiled_charsmap(spec: dict) -> bytes:
    """The SentencePiece normalization map compiled into a tokenizer.json's normalizer (`spec` is the
    file's JSON), or b"" when it has none: the one part of that normalizer AlbertTokenizer keeps."""
    normalizer = spec.get("normalizer") or {}
    steps = normalizer.get("normalizers", [normalizer])
    return next((base64.b64decode(n["precompiled_charsmap"]) for n in steps
                 if n.get("type") == "Precompiled" and n.get("precompiled_charsmap")), b"")


def _word_start_mark(pre_tokenizer: dict | None) -> str | None:
    """The mark the pre-tokenizer (tokenizer.json's entry) puts at each word's start: "Ġ" for
    byte-level, Metaspace's replacement ("▁"); None if it puts none."""
    if not pre_tokenizer:
        return None
    if pre_tokenizer.get("type") == "Sequence":
        return next(filter(None, map(_word_start_mark, pre_tokenizer.get("pretokenizers", []))), None)
    if pre_tokenizer.get("type") == "ByteLevel":
        return BYTE_LEVEL_SPACE
    if pre_tokenizer.get("type") == "Metaspace":
        return pre_tokenizer.get("replacement", METASPACE)
    return None


def _frame_of(backend: _Backend) -> Frame:
    """Read the special-token layout out of the post-processor's JSON (the Python objects do not
    expose their templates). Handles the three kinds the families use, also inside a Sequence
    (ModernBERT-style files: ByteLevel, which only trims offsets, then the template)."""
    post = json.loads(backend.to_str()).get("post_processor")
    if post is not None and post["type"] == "Sequence":
        framing = [p for p in post.get("processors", []) if p["type"] != "ByteLevel"]
        if len(framing) > 1:
            raise BertkitError("a post-processor Sequence with more than one framing step is not supported by the "
                               f"data pipeline ({', '.join(p['type'] for p in framing)})")
        post = framing[0] if framing else None
    if post is None:
        return Frame(single=(("A", 0),), pair=(("A", 0), ("B", 1)))
    kind = post["type"]
    if kind == "TemplateProcessing":
        def parts(template):
            out = []
            for item in template:
                if "Sequence" in item:
                    out.append((item["Sequence"]["id"], item["Sequence"]["type_id"]))
                else:
                    name, type_id = item["SpecialToken"]["id"], item["SpecialToken"]["type_id"]
                    out.extend((i, type_id) for i in post["special_tokens"][name]["ids"])
            return tuple(out)
        return Frame(single=parts(post["single"]), pair=parts(post["pair"]))
    if kind == "RobertaProcessing":  # <s> A </s> and <s> A </s></s> B </s>, all type 0
        cls, sep = post["cls"][1], post["sep"][1]
        return Frame(single=((cls, 0), ("A", 0), (sep, 0)),
                     pair=((cls, 0), ("A", 0), (sep, 0), (sep, 0), ("B", 0), (sep, 0)))
    if kind == "BertProcessing":
        cls, sep = post["cls"][1], post["sep"][1]
        return Frame(single=((cls, 0), ("A", 0), (sep, 0)),
                     pair=((cls, 0), ("A", 0), (sep, 0), ("B", 1), (sep, 1)))
    raise BertkitError(f"post-processor {kind!r} is not supported by the data pipeline "
                       "(TemplateProcessing, RobertaProcessing and BertProcessing are)")


# ---- pipelines, one per family of files -------------------------------------------------------
def wordpiece_pipeline(vocab: dict[str, int], config: dict) -> _Backend:
    """BERT's WordPiece pipeline around a vocabulary, cased or not as `do_lower_case` says (absent
    means uncased, the default of BERT's released tokenizer); accents follow `strip_accents`,
    which when absent follows the casing, as in BERT's BasicTokenizer."""
    special = {k: config.get(k) or default for k, default in  # (a key set to null: unnamed, not absent here)
               (("unk_token", "[UNK]"), ("cls_token", "[CLS]"), ("sep_token", "[SEP]"))}
    for key, token in special.items():
        if token not in vocab:
            raise BertkitError(f"the {key} {token!r} is not in the vocabulary")
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
    specials = [t for t in (config.get(k, BERT_SPECIALS.get(k)) for k in SPECIAL_KEYS) if t and t in vocab]
    backend.add_special_tokens(specials)
    return backend


# What Rust's trim_end drops, and so `tokenizers` from the end of a vocab.txt line: Unicode's
# White_Space characters (str.rstrip() also drops \x1c-\x1f, which can be part of a token)
WHITE_SPACE = "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a" \
              "\u2028\u2029\u202f\u205f\u3000"


def _wordpiece_from_vocab(vocab_file: Path, config: dict) -> _Backend:
    # As `tokenizers` reads vocab.txt for transformers 5 (WordPiece.read_file): a token's id is its
    # line's index, trailing whitespace is not part of it, and a repeated token takes its last line.
    vocab = {line.rstrip(WHITE_SPACE): index for index, line in enumerate(text_lines(read_plain(vocab_file)))}
    try:
        return wordpiece_pipeline(vocab, config)
    except BertkitError as e:
        raise BertkitError(f"{vocab_file}: {e}") from None


def _byte_level_bpe(vocab: dict[str, int], merges: list[tuple[str, str]], add_prefix_space: bool) -> _Backend:
    """GPT-2's byte-level BPE (Radford et al., 2019, sec. 2.2): every byte has a printable stand-in,
    so no text is ever unknown. RoBERTa and DeBERTa v1 both use it, with their own special tokens."""
    backend = _Backend(models.BPE(vocab, merges, continuing_subword_prefix="", end_of_word_suffix="",
                                  fuse_unk=False))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=add_prefix_space)
    backend.decoder = decoders.ByteLevel()
    return backend


def byte_level_bpe_pipeline(vocab: dict[str, int], merges: list[tuple[str, str]], specials: dict[str, str],
                            add_prefix_space: bool = False, trim_offsets: bool = True) -> _Backend:
    """RoBERTa's byte-level BPE: <s> A </s></s> B </s> around the ids."""
    backend = _byte_level_bpe(vocab, merges, add_prefix_space)
    backend.add_special_tokens([specials[k] for k in ROBERTA_SPECIALS if k in specials])
    sep, cls = specials["sep_token"], specials["cls_token"]
    backend.post_processor = processors.RobertaProcessing(
        (sep, backend.token_to_id(sep)), (cls, backend.token_to_id(cls)), trim_offsets=trim_offsets,
        add_prefix_space=add_prefix_space)
    return backend


def deberta_bpe_pipeline(vocab: dict[str, int], merges: list[tuple[str, str]], specials: dict[str, str],
                         add_prefix_space: bool = False) -> _Backend:
    """DeBERTa v1's tokenizer (He et al., 2021, reuse GPT-2's vocabulary) as transformers'
    DebertaTokenizer builds it: RoBERTa's byte-level BPE under BERT's token names, [CLS] A [SEP] and
    [CLS] A [SEP] [SEP] B [SEP], every segment id 0. The class documents a mask token that takes the
    space before it, but v5 registers [MASK] without lstrip, and so does this."""
    backend = _byte_level_bpe(vocab, merges, add_prefix_space)
    _add_cls_sep_frame(backend, specials, DEBERTA_V3_SPECIALS, pair=DEBERTA_PAIR)
    return backend


def _model_max_length(config: dict, config_file: Path) -> int | None:
    """tokenizer_config.json's model_max_length, else the max_len of files older than transformers
    3 (which transformers still reads); None for none or transformers' 1e30 "no limit"."""
    key = "model_max_length" if config.get("model_max_length") is not None else "max_len"
    value = config.get(key)
    if value is None:
        return None
    whole = isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 1
    if whole and value >= NO_LIMIT // 10:  # (inf too)
        return None
    if not whole or value != int(value):
        raise BertkitError(f"{config_file}: {key} must be a whole number of tokens, not {value!r}")
    return int(value)


# transformers' clean_up_tokenization, in its order: the spaces WordPiece's decoding leaves before
# punctuation and English contractions
CLEAN_UPS = ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"), (" 'm", "'m"),
             (" 's", "'s"), (" 've", "'ve"), (" 're", "'re"))


def _check_multiple(multiple) -> None:
    if multiple is not None and (not isinstance(multiple, int) or isinstance(multiple, bool) or multiple < 1):
        raise BertkitError(f"pad_to_multiple_of must be a whole number of tokens, at least 1, got {multiple!r}")


def _with_defaults(defaults: dict[str, str], specials: dict[str, str], config: dict) -> dict[str, str]:
    """The class's default special tokens where the files (`specials`) name none, except for a key
    tokenizer_config.json sets to null: transformers leaves that one unnamed."""
    return {**{k: v for k, v in defaults.items() if not (k in config and config[k] is None)}, **specials}


def _byte_level_for_class(cls: str | None, vocab: dict[str, int], merges: list[tuple[str, str]],
                          config: dict, specials: dict[str, str]) -> tuple[_Backend, dict[str, str]]:
    """DebertaTokenizer's pipeline for that `cls`, else RoBERTa's (what a vocab.json + merges.txt
    means when nothing says more), with the class's special tokens where the files name none; and
    the special tokens it ends up with."""
    add_prefix_space = bool(config.get("add_prefix_space", False))
    if cls == "DebertaTokenizer":
        specials = _with_defaults(DEBERTA_V3_SPECIALS, specials, config)
        return deberta_bpe_pipeline(vocab, merges, specials, add_prefix_space), specials
    specials = _with_defaults(ROBERTA_SPECIALS, specials, config)
    return byte_level_bpe_pipeline(vocab, merges, specials, add_prefix_space,
                                   trim_offsets=bool(config.get("trim_offsets", True))), specials


def _bpe_from_files(vocab_file: Path, merges_file: Path, cls: str | None, config: dict,
                    specials: dict[str, str]) -> tuple[_Backend, dict[str, str]]:
    if not merges_file.exists():
        raise BertkitError(f"{vocab_file}: a byte-level BPE vocab.json needs merges.txt next to it ({merges_file} is missing)")
    vocab = read_json(vocab_file)
    merges = []
    for n, line in enumerate(text_lines(read_plain(merges_file)), 1):
        if not line or (n == 1 and line.startswith("#version")):
            continue
        parts = line.split(" ")
        if len(parts) != 2:
            raise BertkitError(f"{merges_file}, line {n}: expected two tokens separated by one space")
        merges.append((parts[0], parts[1]))
    return _byte_level_for_class(cls, vocab, merges, config, specials)


def unigram_pipeline(pieces: list[tuple[str, float]], unk_id: int, specials: dict[str, str],
                     lowercase: bool = False, split_by_punct: bool = False, prepend_scheme: str = "always") -> _Backend:
    """DeBERTa-v3's SentencePiece Unigram as `transformers` (v5) builds it: whitespace runs
    and tabs/newlines become one space, NFC, "▁" marks every word start (including the first,
    unless `prepend_scheme` is "first", DebertaV2Tokenizer's add_prefix_space=false),
    [CLS] A [SEP] B [SEP] with segment ids 0/1."""
    backend = _Backend(models.Unigram(pieces, unk_id=unk_id, byte_fallback=False))
    steps = [normalizers.Lowercase()] if lowercase else []
    steps += [normalizers.Replace(Regex(r"\s{2,}|[\n\r\t]"), " "), normalizers.NFC(),
              normalizers.Strip(left=False, right=True)]
    backend.normalizer = normalizers.Sequence(steps)
    pre = [pre_tokenizers.Punctuation(behavior="isolated")] if split_by_punct else []
    pre.append(pre_tokenizers.Metaspace(replacement=METASPACE, prepend_scheme=prepend_scheme))
    backend.pre_tokenizer = pre_tokenizers.Sequence(pre)
    backend.decoder = decoders.Metaspace(replacement=METASPACE, prepend_scheme=prepend_scheme)
    _add_cls_sep_frame(backend, specials, DEBERTA_V3_SPECIALS)
    return backend


def albert_pipeline(pieces: list[tuple[str, float]], unk_id: int, specials: dict[str, str],
                    lowercase: bool = True, keep_accents: bool = False, charsmap: bytes = b"",
                    prepend_scheme: str = "always") -> _Backend:
    """ALBERT's SentencePiece Unigram as `transformers`' AlbertTokenizer builds it from
    spiece.model. Its normalizer replays the original slow tokenizer's preprocessing (Lan et al.,
    2020, google-research/albert tokenization.py): LaTeX quotes `` and '' become ", accents are
    dropped by NFKD (unless keep_accents), lowercase (unless do_lower_case is false), then the
    model's own precompiled NFKC map. Words are split on whitespace, so runs of spaces, tabs and
    newlines count as one ("remove_space", which transformers v5 always applies), and each word
    starts with "▁" (unless `prepend_scheme` is "never", AlbertTokenizer's add_prefix_space=false).
    [CLS] A [SEP] B [SEP], segment ids 0/1."""
    backend = _Backend(models.Unigram(pieces, unk_id=unk_id, byte_fallback=False))
    steps = [normalizers.Replace("``", '"'), normalizers.Replace("''", '"')]
    if not keep_accents:
        steps += [normalizers.NFKD(), normalizers.StripAccents()]
    if lowercase:
        steps.append(normalizers.Lowercase())
    if charsmap:
        steps.append(normalizers.Precompiled(charsmap))
    backend.normalizer = normalizers.Sequence(steps)
    backend.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Metaspace(replacement=METASPACE, prepend_scheme=prepend_scheme)])
    backend.decoder = decoders.Metaspace(replacement=METASPACE, prepend_scheme=prepend_scheme)
    _add_cls_sep_frame(backend, specials, ALBERT_SPECIALS)
    return backend


def xlm_roberta_pipeline(pieces: list[tuple[str, float]], specials: dict[str, str], charsmap: bytes = b"",
                         prepend_scheme: str = "always", unk_id: int = 3) -> _Backend:
    """XLM-R's SentencePiece Unigram as `transformers`' (v5) XLMRobertaTokenizer builds it around a
    vocabulary: the model's precompiled normalization map only, words split on whitespace (so runs
    of spaces and a trailing space make no piece), "▁" before each word, unk_id 3 (fairseq's
    order <s> <pad> </s> <unk>), and RoBERTa's frame <s> A </s></s> B </s> with segment 0 throughout.
    Multilingual sentence encoders (paraphrase-multilingual-MiniLM, multilingual-e5) put this
    tokenizer beside a BERT model. CamemBERT's class builds the same around its vocabulary, with
    its own unk_id (`_camembert_for_class`)."""
    backend = _Backend(models.Unigram(pieces, unk_id=unk_id, byte_fallback=False))
    if charsmap:
        backend.normalizer = normalizers.Precompiled(charsmap)
    backend.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Metaspace(replacement=METASPACE, prepend_scheme=prepend_scheme)])
    backend.decoder = decoders.Metaspace(replacement=METASPACE, prepend_scheme=prepend_scheme)
    backend.add_special_tokens([specials[k] for k in ROBERTA_SPECIALS if k in specials])
    bos, eos = specials["bos_token"], specials["eos_token"]
    backend.post_processor = processors.TemplateProcessing(
        single=f"{bos}:0 $A:0 {eos}:0", pair=f"{bos}:0 $A:0 {eos}:0 {eos}:0 $B:0 {eos}:0",
        special_tokens=[(bos, backend.token_to_id(bos)), (eos, backend.token_to_id(eos))])
    return backend


def _add_cls_sep_frame(backend: _Backend, specials: dict[str, str], family: dict[str, str],
                       pair: str = BERT_PAIR) -> None:
    """Register the family's named special tokens and frame sequences as [CLS] A [SEP] and, for a
    pair, as `pair` says (the SentencePiece families use BERT's layout with their own token strings,
    DeBERTa v1 its own, see DEBERTA_PAIR)."""
    backend.add_special_tokens([specials[k] for k in family if k in specials])
    cls, sep = specials["cls_token"], specials["sep_token"]
    backend.post_processor = processors.TemplateProcessing(
        single=f"{cls}:0 $A:0 {sep}:0", pair=pair.format(cls=cls, sep=sep),
        special_tokens=[(cls, backend.token_to_id(cls)), (sep, backend.token_to_id(sep))])


def _deberta_v2_for_class(pieces: list[tuple[str, float]], unk_id: int, config: dict,
                          specials: dict[str, str]) -> tuple[_Backend, dict[str, str]]:
    """DebertaV2Tokenizer's pipeline from tokenizer_config.json's flags, with the class's defaults
    (cased, no punctuation split, "▁" before the first word too), and its special tokens."""
    specials = _with_defaults(DEBERTA_V3_SPECIALS, specials, config)
    backend = unigram_pipeline(pieces, unk_id, specials, lowercase=bool(config.get("do_lower_case", False)),
                               split_by_punct=bool(config.get("split_by_punct", False)),
                               prepend_scheme="always" if config.get("add_prefix_space", True) else "first")
    return backend, specials


def _albert_for_class(pieces: list[tuple[str, float]], config: dict, specials: dict[str, str],
                      charsmap: bytes) -> tuple[_Backend, dict[str, str]]:
    """AlbertTokenizer's pipeline from tokenizer_config.json's flags, with the class's defaults
    (uncased, accents dropped, "▁" before every word), and its special tokens. The class always
    gives the Unigram model unk_id 1 (<unk> in ALBERT's files), whatever the vocabulary says."""
    specials = _with_defaults(ALBERT_SPECIALS, specials, config)
    backend = albert_pipeline(pieces, 1, specials, lowercase=bool(config.get("do_lower_case", True)),
                              keep_accents=bool(config.get("keep_accents", False)), charsmap=charsmap,
                              prepend_scheme="always" if config.get("add_prefix_space", True) else "never")
    return backend, specials


def _xlm_roberta_for_class(pieces: list[tuple[str, float]], config: dict, specials: dict[str, str],
                           charsmap: bytes) -> tuple[_Backend, dict[str, str]]:
    """XLMRobertaTokenizer's pipeline ("▁" before every word unless add_prefix_space is false)
    and its special tokens, RoBERTa's where the files name none."""
    specials = {**ROBERTA_SPECIALS, **specials}
    scheme = "always" if config.get("add_prefix_space", True) else "never"
    return xlm_roberta_pipeline(pieces, specials, charsmap, scheme), specials


# CamembertTokenizer's extra special tokens where its files name none: pieces of the fairseq
# dictionary that no text should produce
CAMEMBERT_EXTRA = ("<s>NOTUSED", "</s>NOTUSED", "<unk>NOTUSED")


def _camembert_for_class(pieces: list[tuple[str, float]], config: dict, specials: dict[str, str],
                         charsmap: bytes) -> tuple[_Backend, dict[str, str]]:
    """CamembertTokenizer's pipeline: XLMRobertaTokenizer's, with the unknown piece found by its
    name in the vocabulary, the mask token taking the space before it (lstrip), and its extra
    special tokens (CAMEMBERT_EXTRA) unless tokenizer_config.json lists others."""
    specials = {**ROBERTA_SPECIALS, **specials}
    unk_id = next((i for i, (piece, _) in enumerate(pieces) if piece == specials["unk_token"]), 0)
    scheme = "always" if config.get("add_prefix_space", True) else "never"
    backend = xlm_roberta_pipeline(pieces, specials, charsmap, scheme, unk_id)
    backend.add_special_tokens([AddedToken(specials["mask_token"], lstrip=True, special=True)])
    extra = config.get("extra_special_tokens") or config.get("additional_special_tokens") or CAMEMBERT_EXTRA
    backend.add_special_tokens([t for t in map(_token_content, extra) if t])
    return backend, specials


def _sentencepiece_family(model_file: Path, config: dict) -> str:
    """"albert" or "deberta-v3": which pipeline an spm file gets. tokenizer_config.json's
    tokenizer_class decides when it names one of the two; otherwise the file name does, as it does
    for transformers (AlbertTokenizer reads spiece.model, DebertaV2Tokenizer spm.model). Another
    class (T5, XLNet, ...) normalizes differently, so it is refused rather than guessed."""
    name = config.get("tokenizer_class")
    if isinstance(name, str):
        family = SPM_CLASSES.get(name.removesuffix("Fast"))
        if family is None:
            raise BertkitError(f"{model_file.parent / 'tokenizer_config.json'}: tokenizer_class {name!r} is not a "
                               f"SentencePiece tokenizer bertkit reads (one of {', '.join(SPM_CLASSES)})")
        return family
    return {"spiece.model": "albert", "sentencepiece.bpe.model": "xlm-roberta"}.get(model_file.name, "deberta-v3")


def _unigram_from_spm(model_file: Path, config: dict, specials: dict) -> tuple[_Backend, dict[str, str]]:
    """The backend for a SentencePiece file and the special tokens it ends up with."""
    from .spm import read_spm_model

    spm = read_spm_model(model_file)
    if spm.model_type != "unigram":
        raise BertkitError(f"{model_file}: a SentencePiece {spm.model_type} model; only Unigram models "
                           "(DeBERTa-v3, ALBERT) are supported")
    family = _sentencepiece_family(model_file, config)
    if family == "xlm-roberta":  # fairseq's ids: <s> <pad> </s> <unk>, the model's pieces after its own three
        named = {**ROBERTA_SPECIALS, **specials}  # control ones, <mask> last (transformers' converter)
        pieces = [(named[k], 0.0) for k in ("bos_token", "pad_token", "eos_token", "unk_token")]
        return _xlm_roberta_for_class(pieces + spm.pieces[3:] + [(named["mask_token"], 0.0)], config, specials,
                                      spm.charsmap)
    if family == "albert":
        backend, specials = _albert_for_class(spm.pieces, config, specials, spm.charsmap)
    else:
        backend, specials = _deberta_v2_for_class(spm.pieces, spm.unk_id, config, specials)
    # control and user-defined pieces are matched whole in the raw text, as transformers does
    named = set(backend.get_vocab(with_added_tokens=True)) & set(specials.values())
    backend.add_tokens([AddedToken(p, normalized=False, special=kind == "control")
                        for p, kind in zip(spm.piece_strings, spm.kinds)
                        if kind in ("control", "user") and p not in named])
    return backend, specials


def _token_content(value) -> str | None:
    """A token as tokenizer_config.json writes it: a string, or an AddedToken dict with its text
    under "content" (transformers 4.x wrote the named special tokens that way)."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _added_token(value, special: bool) -> AddedToken | None:
    """An AddedToken with the flags tokenizer_config.json gives it. The flags change ids: RoBERTa
    checkpoints saved by transformers 4.x mark <mask> lstrip, so "a <mask>" has no "Ġ" token."""
    content = _token_content(value)
    if content is None:
        return None
    flags = value if isinstance(value, dict) else {}
    special = bool(flags.get("special", special))
    return AddedToken(content, single_word=bool(flags.get("single_word", False)), lstrip=bool(flags.get("lstrip", False)),
                      rstrip=bool(flags.get("rstrip", False)), normalized=bool(flags.get("normalized", not special)),
                      special=special)


def _config_tokens(config: dict, config_file: Path) -> list[tuple[int | None, AddedToken]]:
    """The tokens tokenizer_config.json adds or re-flags, in the order transformers applies them:
    added_tokens_decoder by id (tokens added after training, or vocabulary tokens given flags),
    then named special tokens written as dicts, then (v5's name) extra_special_tokens, or where
    those list none the older additional_special_tokens (transformers ignores them beside a list).
    Each comes with the id it must get, when the file says."""
    table = config.get("added_tokens_decoder") or {}
    if not isinstance(table, dict):
        raise BertkitError(f"{config_file}: added_tokens_decoder must map ids to tokens")
    out: list[tuple[int | None, AddedToken]] = []
    for key, value in table.items():
        token = _added_token(value, special=False)
        if not str(key).isdigit() or token is None:
            raise BertkitError(f"{config_file}: added_tokens_decoder entry {key!r} is not an id with a token")
        out.append((int(key), token))
    out.sort(key=lambda pair: pair[0])
    extra = [config[k] for k in SPECIAL_KEYS if isinstance(config.get(k), dict)]
    listed = config.get("extra_special_tokens") or config.get("additional_special_tokens") or []
    extra += list(listed.values()) if isinstance(listed, dict) else list(listed)
    known = {t.content for _, t in out}
    for value in extra:
        token = _added_token(value, special=True)
        if token is not None and token.content not in known:
            out.append((None, token))
            known.add(token.content)
    return out


def _add_listed_tokens(backend: _Backend, tokens: list[tuple[int | None, AddedToken]], listed_in: str) -> None:
    """Register the tokens a file lists (`listed_in` names the file and its key); a token already in
    the vocabulary keeps its id and takes the file's flags, a new one is appended. An id that comes out
    differently from the one the file records would shift every later id, so it is an error."""
    for want, token in tokens:
        (backend.add_special_tokens if token.special else backend.add_tokens)([token])
        got = backend.token_to_id(token.content)
        if want is not None and got != want:
            raise BertkitError(f"{listed_in} puts {token.content!r} at id {want}, but the vocabulary gives it id {got}")


def _legacy_added_tokens(path: Path, config: dict, special: dict[str, str]) -> list[tuple[int, AddedToken]]:
    """added_tokens.json (token -> id), where tokenizers saved before transformers 4.34 kept the
    tokens added after training; transformers still reads it when tokenizer_config.json has no
    added_tokens_decoder: a special token as special, any other as a normalized token, and these
    flags stay. Special are the named tokens and those tokenizer_config.json lists (its
    extra_special_tokens, else its additional_special_tokens) or special_tokens_map.json lists
    as extra_special_tokens; not those of the map's additional_special_tokens (an "<ent>" listed
    only there stays a normalized, non-special token, as in transformers 5)."""
    if "added_tokens_decoder" in config or not path.is_file():
        return []
    table = read_json(path)
    if not all(isinstance(t, str) and isinstance(i, int) and not isinstance(i, bool) for t, i in table.items()):
        raise BertkitError(f"{path}: expected an object of tokens and their ids")
    own, spec = (path.parent / name for name in ("tokenizer_config.json", "special_tokens_map.json"))
    own, spec = (read_json(f) if f.is_file() else {} for f in (own, spec))
    named = set(special.values())
    for listed in (own.get("extra_special_tokens") or own.get("additional_special_tokens"),
                   spec.get("extra_special_tokens")):
        listed = list(listed.values()) if isinstance(listed, dict) else listed if isinstance(listed, list) else []
        named.update(content for content in map(_token_content, listed) if content is not None)
    return sorted((i, AddedToken(t, normalized=t not in named, special=t in named)) for t, i in table.items())


def _tokenizer_config(directory: Path) -> dict:
    """tokenizer_config.json as transformers reads it: special_tokens_map.json counts only when the
    config has no added_tokens_decoder (files older than transformers 4.34), and then its named tokens
    win over the config's, each one special (PreTrainedTokenizerBase._from_pretrained). Its
    additional_special_tokens count where the config lists none (NER checkpoints mark entities
    with [unusedN] tokens there: transformers 5.23 then keeps the config's list), and its
    extra_special_tokens join the config's."""
    config_file, map_file = directory / "tokenizer_config.json", directory / "special_tokens_map.json"
    config = read_json(config_file) if config_file.exists() else {}
    if "added_tokens_decoder" not in config and map_file.exists():
        for key, value in read_json(map_file).items():
            if key in SPECIAL_KEYS and _token_content(value) is not None:
                config[key] = {**value, "special": True} if isinstance(value, dict) else value
            elif key == "additional_special_tokens" and isinstance(value, list):
                if not (config.get(key) or config.get("extra_special_tokens")):
                    config[key] = value
            elif key == "extra_special_tokens" and isinstance(value, list):
                before = config.get(key) if isinstance(config.get(key), list) else []
                config[key] = before + [v for v in value if v not in before]
    return config


def tokenizer_class(directory: Path, config: dict) -> str | None:
    """The transformers class `AutoTokenizer.from_pretrained(directory)` builds, named without the
    "Fast" suffix (in v5 each *Fast class is the class itself): tokenizer_config.json's (`config`)
    tokenizer_class, else config.json's, else the class MODEL_TYPE_TOKENIZERS registers for
    config.json's model_type; None when no file says. A model type registered as TokenizersBackend
    (ModernBERT) gets it whatever the files name, as AutoTokenizer does."""
    model_file = directory / "config.json"
    model = read_json(model_file) if model_file.exists() else {}
    registered = MODEL_TYPE_TOKENIZERS.get(model.get("model_type"))
    named = config.get("tokenizer_class") or model.get("tokenizer_class")
    if registered == "TokenizersBackend" or not isinstance(named, str):
        return registered
    return named.removesuffix("Fast")


def _read_tokenizer_json(path: Path) -> _Backend:
    try:
        return _Backend.from_file(str(path))
    except Exception as e:  # tokenizers raises a bare Exception with serde's message
        try:  # valid JSON of another shape reads better as that than as serde's position
            spec = json.loads(read_plain(path))
        except (ValueError, BertkitError):
            spec = None
        if isinstance(spec, dict) and "model" not in spec:
            raise BertkitError(f"{path}: JSON without a tokenizer \"model\" (keys: {shown(', '.join(spec))}); "
                               "not a tokenizers tokenizer.json") from None
        raise BertkitError(f"{path}: not a readable tokenizer.json ({first_line(e)})") from None


def _from_tokenizer_json(path: Path, cls: str | None, config: dict, specials: dict[str, str]
                         ) -> tuple[_Backend, dict[str, str], list[tuple[int, AddedToken]]]:
    """tokenizer.json as transformers' class `cls` reads it, the special tokens it ends up with, and
    the file's added tokens to register (again) after the pipeline's own. TokenizersBackend
    (PreTrainedTokenizerFast) and any class bertkit does not know read the file as is; a
    REBUILDING_CLASSES class keeps only the vocabulary (`_rebuilt`). A model the class cannot take is
    read as is too: transformers would force the vocabulary into the class's model (a BertTokenizer
    over a BPE vocabulary makes nearly every word [UNK]), a tokenizer no checkpoint means."""
    backend = _read_tokenizer_json(path)
    # Without an added_tokens_decoder in tokenizer_config.json, transformers takes tokenizer.json's added
    # tokens in its place, flags included, whatever the class (PreTrainedTokenizerBase._from_pretrained)
    listed = [] if "added_tokens_decoder" in config else sorted(backend.get_added_tokens_decoder().items())
    if REBUILDING_CLASSES.get(cls) != type(backend.model).__name__:
        if cls in REBUILDING_CLASSES:
            warnings.warn(f"{path}: the files name {cls}, a {REBUILDING_CLASSES[cls]} tokenizer, but this file holds a "
                          f"{type(backend.model).__name__} model; it is read as it is, where transformers would force "
                          "its vocabulary into the class's model and give other ids", stacklevel=outside_stacklevel())
        return backend, specials, listed
    try:
        rebuilt, specials = _rebuilt(backend, cls, config, specials)
    except BertkitError as e:
        raise BertkitError(f"{path}: {e}") from None
    return rebuilt, specials, listed


def _rebuilt(backend: _Backend, cls: str, config: dict, specials: dict[str, str]) -> tuple[_Backend, dict[str, str]]:
    """The pipeline class `cls` builds around `backend`'s vocabulary, and its special tokens."""
    spec = json.loads(backend.to_str())
    model = spec["model"]
    if model["type"] == "WordPiece":  # with BertTokenizer's default names (a missing one is appended)
        return wordpiece_pipeline(model["vocab"], config), _with_defaults(BERT_SPECIALS, specials, config)
    if model["type"] == "BPE":
        merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
        return _byte_level_for_class(cls, model["vocab"], merges, config, specials)
    pieces = [tuple(p) for p in model["vocab"]]
    if cls == "XLMRobertaTokenizer":
        return _xlm_roberta_for_class(pieces, config, specials, _precompiled_charsmap(spec))
    if cls == "CamembertTokenizer":
        return _camembert_for_class(pieces, config, specials, _precompiled_charsmap(spec))
    if cls == "AlbertTokenizer":
        rebuilt, specials = _albert_for_class(pieces, config, specials, _precompiled_charsmap(spec))
        if backend.post_processor is not None:  # AlbertTokenizer sets its own before TokenizersBackend.__init__,
            rebuilt.post_processor = backend.post_processor  # which puts back the one tokenizer.json holds
        return rebuilt, specials
    # DebertaV2Tokenizer finds the unknown piece by its (piece, 0.0) entry, else takes unk_id (default 1)
    unk = (specials.get("unk_token", DEBERTA_V3_SPECIALS["unk_token"]), 0.0)
    unk_id = pieces.index(unk) if unk in pieces else int(config.get("unk_id", 1))
    return _deberta_v2_for_class(pieces, unk_id, config, specials)


TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "vocab.json", "spm.model", "spiece.model", "sentencepiece.bpe.model")


# The classes whose pipeline bertkit builds from a vocabulary file alone (without tokenizer.json);
# the .model files' classes are checked by _sentencepiece_family
# (with the classes transformers 5 builds as BERT's or RoBERTa's from those files)
SLOW_FILE_CLASSES = {"vocab.txt": ("BertTokenizer", "DistilBertTokenizer", "ElectraTokenizer", "MobileBertTokenizer",
                                   "SqueezeBertTokenizer", "LayoutLMTokenizer", "LxmertTokenizer"),
                     "vocab.json": ("RobertaTokenizer", "DebertaTokenizer", "LongformerTokenizer", "BartTokenizer")}


def _check_slow_class(path: Path, cls: str | None) -> None:
    """A vocabulary file whose folder names another class (HerBERT's word-end BPE over vocab.json,
    BertJapaneseTokenizer's MeCab or character split, MPNet's frame over vocab.txt), in
    tokenizer_config.json or config.json, or a model_type whose tokenizer bertkit does not know,
    is refused, not read as BERT's or RoBERTa's: its ids would differ. A tokenizer.json is read
    as is by any unknown class."""
    known = SLOW_FILE_CLASSES.get(path.name)
    if not known:
        return
    if cls is not None and cls not in known:
        raise BertkitError(f"{path.parent}: tokenizer_class {cls!r} is not a tokenizer bertkit builds from {path.name} "
                           f"(one of {', '.join(known)}); a tokenizer.json of it would be read as is")
    model_file = path.parent / "config.json"
    model_type = read_json(model_file).get("model_type") if cls is None and model_file.exists() else None
    if isinstance(model_type, str) and model_type not in MODEL_TYPE_TOKENIZERS:
        raise BertkitError(f"{model_file}: model_type {model_type!r}: bertkit does not know how its tokenizer reads "
                           f"{path.name}; a tokenizer.json of it would be read as is")


def _check_text_and_pair(text, text_pair) -> None:
    """One text (a string) and perhaps its pair: a wrong type is one error naming the argument."""
    for name, value in (("text", text), ("text_pair", text_pair)):
        if not isinstance(value, str) and not (name == "text_pair" and value is None):
            raise BertkitError(f"{name} must be a string, not {type(value).__name__}")


def _check_word_lists(texts, name: str) -> None:
    """Texts given as words (is_split_into_words): a list of lists of strings."""
    if not isinstance(texts, (list, tuple)):
        raise BertkitError(f"{name} must be a list of words or a list of such lists (is_split_into_words), "
                           f"not {type(texts).__name__}")
    for n, words in enumerate(texts):
        if not isinstance(words, (list, tuple)):
            raise BertkitError(f"{name}: item {n} is {type(words).__name__}, not a list of words "
                               "(is_split_into_words)")
        _check_strings(words, f"{name}: item {n}")


# what each key of a call's batch holds, from a `tokenizers` Encoding
ROW_VALUES = {"input_ids": lambda e: e.ids, "attention_mask": lambda e: [1] * len(e.ids),
              "token_type_ids": lambda e: e.type_ids, "special_tokens_mask": lambda e: e.special_tokens_mask,
              "offset_mapping": lambda e: [list(o) for o in e.offsets]}


def _listed(key: str, row: list) -> list:
    """A batch row as lists give it: offsets as (start, end) tuples, as transformers gives them."""
    return [tuple(o) for o in row] if key == "offset_mapping" else row


def _check_strings(texts, name: str) -> None:
    """Texts a tokenizer is given: a list of strings, one error naming the item otherwise, not
    `tokenizers`' "TextEncodeInput must be ..." (reported as a truncation)."""
    if not isinstance(texts, (list, tuple)):
        raise BertkitError(f"{name} must be a string or a list of strings, not {type(texts).__name__}")
    for n, text in enumerate(texts):
        if not isinstance(text, str):
            raise BertkitError(f"{name}: item {n} is {type(text).__name__}, not a string")


def load_tokenizer(path: str | Path) -> Tokenizer:
    """A tokenizer from a checkpoint directory or one of its files: tokenizer.json, vocab.txt
    (WordPiece, casing from the tokenizer_config.json beside it), vocab.json (byte-level BPE, with
    merges.txt beside it; DeBERTa v1's when the files name DebertaTokenizer), spm.model (DeBERTa-v3's
    SentencePiece Unigram) or spiece.model (ALBERT's; see `_sentencepiece_family`). The files beside
    it decide the transformers class (`tokenizer_class`), and so how a tokenizer.json is read."""
    if not isinstance(path, (str, os.PathLike)):
        raise BertkitError(f"load_tokenizer takes a folder or a tokenizer file, not {type(path).__name__}")
    path = Path(path)
    if not path.exists() and not path.suffix:  # not a file name: perhaps a hub id (needs the network)
        from ..hub import resolve

        path = resolve(path)
    if not path.exists():
        raise BertkitError(f"{path}: no such file or directory")
    directory = path if path.is_dir() else path.parent
    if path.is_dir():
        path = next((directory / n for n in TOKENIZER_FILES if (directory / n).exists()), None)
        if path is None:
            raise BertkitError(f"{directory}: no {', '.join(TOKENIZER_FILES)} in this directory")
    config_file = directory / "tokenizer_config.json"
    config = _tokenizer_config(directory)
    cls = tokenizer_class(directory, config)
    config_tokens = _config_tokens(config, config_file)
    # a key the files set to null names no token: transformers leaves it None, not the class's default
    unnamed = [k for k in SPECIAL_KEYS if k in config and config[k] is None]
    special = {k: _token_content(config[k]) for k in SPECIAL_KEYS if _token_content(config.get(k)) is not None}
    config = {**config, **special}  # the named tokens as plain strings for the pipelines below
    file_tokens: list[tuple[int, AddedToken]] = []
    _check_slow_class(path, cls)
    if path.suffix == ".model" and cls == "CamembertTokenizer":  # its fairseq ids differ from XLM-R's
        raise BertkitError(f"{path}: bertkit reads CamemBERT's tokenizer from its tokenizer.json, not from the "
                           "SentencePiece file alone")
    if path.name.endswith(".json") and path.name != "vocab.json":
        backend, special, file_tokens = _from_tokenizer_json(path, cls, config, special)
    elif path.name == "vocab.json":
        backend, special = _bpe_from_files(path, directory / "merges.txt", cls, config, special)
    elif path.suffix == ".model":
        backend, special = _unigram_from_spm(path, config, special)
    elif path.suffix == ".txt":
        backend = _wordpiece_from_vocab(path, config)
        if REBUILDING_CLASSES.get(cls) == "WordPiece":
            special = _with_defaults(BERT_SPECIALS, special, config)  # (a missing one is appended below)
    else:
        raise BertkitError(f"{path}: unknown tokenizer file (expected one of {', '.join(TOKENIZER_FILES)})")
    # transformers registers the file's added tokens first, then tokenizer_config.json's; a token in both
    # keeps the file's flags, as transformers swaps the config's named tokens for the file's
    _add_listed_tokens(backend, file_tokens, f"{path}: added_tokens")
    in_file = {token.content for _, token in file_tokens}
    legacy_file = directory / "added_tokens.json"
    legacy = [(i, t) for i, t in _legacy_added_tokens(legacy_file, config, special) if t.content not in in_file]
    _add_listed_tokens(backend, legacy, str(legacy_file))
    in_file |= {token.content for _, token in legacy}  # (their flags stay, as transformers keeps them)
    _add_listed_tokens(backend, [(i, t) for i, t in config_tokens if t.content not in in_file],
                       f"{config_file}: added_tokens_decoder")
    # a token of the files' that the config lists as special keeps the files' flags, yet transformers'
    # special-token masks and lists count it (a collator never masks it)
    decoder = backend.get_added_tokens_decoder()
    listed = [t.content for _, t in config_tokens
              if t.special and t.content in in_file and not decoder[backend.token_to_id(t.content)].special]
    for key in unnamed:
        special.pop(key, None)  # (a pipeline above may have filled in its family's token)
    # A named special token the vocabulary lacks is appended, as transformers appends it (in its
    # order of names): a BERT vocabulary given mask_token "<mask>" gets "<mask>" as a new id.
    backend.add_special_tokens(list(dict.fromkeys(
        special[k] for k in NAMING_ORDER if k in special and backend.token_to_id(special[k]) is None)))
    # Files without a tokenizer_config.json still name BERT's special tokens in their vocabulary.
    for key, token in BERT_SPECIALS.items():
        if key not in special and key not in unnamed and backend.token_to_id(token) is not None:
            special[key] = token
    kept = {**{k: v for k, v in config.items() if k in CONFIG_FLAGS}, **dict.fromkeys(unnamed)}  # (saved as null)
    names = config.get("model_input_names")
    if isinstance(names, list) and names and all(isinstance(n, str) for n in names):
        kept["model_input_names"] = names  # (written back when saved)
    for key in ("padding_side", "truncation_side"):
        if kept.get(key, "right") not in ("left", "right"):
            raise BertkitError(f"{config_file}: {key} must be 'left' or 'right', got {kept[key]!r}")
    length = _model_max_length(config, config_file)
    if length is not None:
        kept["model_max_length"] = length  # sentence-transformers 6 keeps its length there
    tokenizer = Tokenizer(backend, special, kept)
    tokenizer.listed_specials = listed
    tokenizer.tokenizer_class = cls
    tokenizer.source_files = {name: (directory / name).read_bytes() for name in VOCABULARY_FILES
                              if (directory / name).is_file()}
    return tokenizer


# the vocabulary files of transformers' SentencePiece and BPE tokenizer classes (vocab.txt is
# written from the vocabulary itself)
VOCABULARY_FILES = ("spm.model", "spiece.model", "sentencepiece.bpe.model", "vocab.json", "merges.txt")


def check_vocab_fits(tokenizer: Tokenizer, model_vocab_size: int, type_vocab_size: int | None = None) -> None:
    """Raise if the tokenizer can produce an id the model has no embedding row for (an index error
    deep inside the first forward pass otherwise, or silent garbage on some devices): a token id,
    or, given the model's `type_vocab_size` (0: it reads no token types), a pair's segment id (a
    BERT tokenizer's 1 beside RoBERTa's single token type: every pair input of the saved model fails)."""
    if len(tokenizer) > model_vocab_size:
        raise BertkitError(f"the tokenizer has {len(tokenizer)} tokens but the model's vocabulary has "
                           f"{model_vocab_size}; build the model with vocab_size >= {len(tokenizer)}, give "
                           "a loaded model rows for added tokens (model.resize_token_embeddings(len(tokenizer)), "
                           "then save it), or use the tokenizer it was trained with")
    types = 1 + max(t for _, t in tokenizer.frame.pair)
    if type_vocab_size and types > type_vocab_size:
        raise BertkitError(f"the tokenizer gives a text pair {types} segment ids but the model embeds "
                           f"{type_vocab_size} token type(s); build the model with type_vocab_size >= {types} "
                           "(--override type_vocab_size=2) or use a tokenizer of its family")
