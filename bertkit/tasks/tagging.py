"""Token classification (BERT sec. 5.3, NER): one tag per word, BIO entity tags or plain tags
such as part of speech. A word split into several sub-words is labelled, and predicted, at its
first sub-word; the other sub-words get -100 (no loss), as in the paper.

Words are joined by single spaces and tokenized as one text; each token belongs to the word
holding its last character (offsets from the tokenizer), which works for WordPiece, byte-level
BPE and SentencePiece alike and gives the tokenizer the text it was trained on.

Shapes: B batch, T sequence length, C tags.
"""

from __future__ import annotations

import re
import unicodedata

import numpy as np
import torch
import torch.nn.functional as F

from ..errors import BertkitError
from ..objectives.base import Objective, Step, labelled_positions, share
from .base import (IGNORE, Task, known_labels, label_index, model_max_length, ordered_labels, report_truncated,
                   run_batches)
from .metrics import is_bio, tagging_scores
from .readers import TaggedSentence, report

# BERT's CJK ideograph blocks: its tokenizer makes each such character a word of its own, and
# Chinese NER data tags them one by one (kana and Hangul stay in runs, as BERT keeps them)
CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002a6df\U0002a700-\U0002ebef\U0002f800-\U0002fa1f"
WORD = re.compile(
    r"(?:[A-Za-z]\.){2,}"                           # abbreviations: U.S., e.g.
    r"|\d+(?:[.,:]\d+)+"                            # numbers with inner marks: 3.50, 1,000, 12:30
    rf"|[{CJK}]"                                    # one ideograph
    rf"|[^\W{CJK}]+(?:[-'’][^\W{CJK}]+)*"           # words, with inner hyphens and apostrophes
    r"|[^\w\s]")                                    # any other mark


def _joins(char: str) -> bool:
    """A combining mark (an accent written apart, Indic and Thai vowel signs) or an invisible
    format character (zero-width space, joiners): part of the word around it, never one of its
    own, though Python's \\w does not count it."""
    return unicodedata.category(char)[0] == "M" or unicodedata.category(char) == "Cf"


def split_words(text: str) -> tuple[list[str], list[tuple[int, int]]]:
    """Raw text -> words and punctuation marks with their character spans (for `tag` on text).
    A piece that starts with a mark or format character continues the word it touches, and the
    word after it goes on too when it touches: "Jose\u0301" and "नमस्ते" are one word each, as
    BERT's pre-tokenizer reads them."""
    spans: list[list[int]] = []
    for m in WORD.finditer(text):
        start, end = m.span()
        glued = spans and spans[-1][1] == start and (
            _joins(text[start]) or (_joins(text[start - 1]) and text[start].isalnum()))
        if glued:
            spans[-1][1] = end
        elif not all(unicodedata.category(c) == "Cf" for c in m.group()):  # a lone zero-width space: no word
            spans.append([start, end])
    return [text[s:e] for s, e in spans], [(s, e) for s, e in spans]


def encode_sentences(sentences: list[TaggedSentence], tokenizer, max_length: int) -> tuple[list[dict], int]:
    """Features with `first` (W,): each word's first sub-word position in input_ids, or -1 for a
    word cut off by max_length or without any token. Returns the features and how many
    sentences were cut."""
    frame = tokenizer.frame
    budget = max_length - frame.specials(False)
    before = next(i for i, (part, _) in enumerate(frame.single) if part == "A")  # specials ahead of the text
    # Byte-level BPE keeps a word's space in its token ("Ġword"): every word, the first too, is
    # encoded after a space, as transformers encodes pre-split words (add_prefix_space=True).
    lead = " " if tokenizer.spaces_words else ""
    texts = [lead + " ".join(s.words) for s in sentences]
    features, cut = [], 0
    for s, text, (ids, offsets) in zip(sentences, texts, tokenizer.encode_offsets(texts)):
        owner = np.full(len(text), -1, dtype=np.int64)  # character -> word index (spaces: the word after them)
        position = len(lead)
        for w, word in enumerate(s.words):
            owner[position:position + len(word)] = w
            if position:  # the space before a word is the word's: SentencePiece may give it a "▁" piece
                owner[position - 1] = w
            position += len(word) + 1
        if len(ids) > budget:
            ids, offsets = ids[:budget], offsets[:budget]
            cut += 1
        first = np.full(len(s.words), -1, dtype=np.int64)
        for t, (start, end) in enumerate(offsets):
            # a lone "Ġ" has its offsets trimmed to nothing: it is the word at its place's
            w = owner[end - 1] if end > start else owner[start] if start < len(owner) else -1
            if w >= 0 and first[w] < 0:
                first[w] = before + t
        input_ids, types = frame.apply(np.asarray(ids, dtype=np.int64))
        features.append({"input_ids": input_ids, "token_type_ids": types, "first": first})
    return features, cut


class TaggingObjective(Objective):
    """Cross-entropy over labelled positions only (first sub-words): (B, T, C) vs (B, T)."""

    def __init__(self, model):
        super().__init__()
        if model.head_kind != "token-classification":
            raise BertkitError(f"token classification needs a token-classification head, not {model.head_kind!r}")
        self.model = model

    metric_counts = {"": "words"}

    def counts(self, batch):
        """The labelled positions (each word's first sub-word)."""
        return {"words": (batch["labels"] != IGNORE).sum()}

    def forward(self, batch: dict[str, torch.Tensor], totals: dict[str, torch.Tensor] | None = None) -> Step:
        logits = self.model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]).logits.float()
        labels = batch["labels"]  # (B, T), -100 where there is no loss
        scored = labelled_positions(labels, batch["attention_mask"])
        if not scored.any():  # nothing labelled (every word cut off): no loss, not NaN
            zero = logits.sum() * 0.0
            return Step(zero, {"loss": zero.detach(), "accuracy": zero.detach()})
        loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=IGNORE)  # (B*T, C) vs (B*T,)
        accuracy = (logits.argmax(-1)[scored] == labels[scored]).float().mean()
        return Step(share(loss, scored.sum(), totals, "words"), {"loss": loss.detach(), "accuracy": accuracy})


class TokenClassification(Task):
    name = "token-classification"
    head = "token-classification"
    metric = "f1"  # entity-level F1 for BIO tags; plain tags early-stop on accuracy (see metric_for)
    metrics = ("accuracy", "precision", "recall", "f1")

    def labels_of(self, sentences) -> tuple[str, ...]:
        return ordered_labels((t for s in sentences for t in s.tags), sentences)

    def metric_for(self, labels: tuple[str, ...]) -> str:
        return "f1" if is_bio(labels) else "accuracy"

    def _encode(self, sentences, tokenizer, max_length):
        features, cut = encode_sentences(sentences, tokenizer, max_length)
        report_truncated(cut, len(features), max_length, "sentences")
        silent = sum(int((f["first"] < 0).sum()) for f in features)
        return features, silent

    def features(self, sentences, tokenizer, labels, max_length, source):
        index = label_index(labels, [t for s in sentences for t in s.tags], source)
        features, _ = self._encode(sentences, tokenizer, max_length)
        for f, s in zip(features, sentences):
            target = np.full(len(f["input_ids"]), IGNORE, dtype=np.int64)  # (T,)
            kept = f["first"] >= 0
            target[f["first"][kept]] = [index[t] for t, k in zip(s.tags, kept) if k]
            f["labels"] = target
            del f["first"]
        return features

    def objective(self, model):
        return TaggingObjective(model)

    def predict(self, model, sentences, batch_size=64, max_length=None, bf16=False, progress=False):
        """{"tokens": words, "tags": one per word (None where the word was cut off by the length
        limit or gave no token), "scores": each tag's probability}."""
        max_length = model_max_length(model, max_length)
        features, silent = self._encode(sentences, model.tokenizer, max_length)
        report(silent, "{n} word(s) got no prediction (cut off by the length limit, or no token at all)")
        labels = model.config.labels
        results: list[dict | None] = [None] * len(features)
        for chunk, out in run_batches(model, features, batch_size, bf16, ("logits",), progress):
            for row, i in enumerate(chunk):
                first = features[i]["first"]
                logits = out["logits"][row][np.maximum(first, 0)]  # (W, C) at first sub-words
                probs = np.exp(logits - logits.max(-1, keepdims=True))
                probs /= probs.sum(-1, keepdims=True)
                best = probs.argmax(-1)
                results[i] = {"tokens": list(sentences[i].words),
                              "tags": [labels[k] if f >= 0 else None for k, f in zip(best, first)],
                              "scores": [float(p[k]) if f >= 0 else None for k, p, f in zip(best, probs, first)]}
        return results

    def check_gold(self, sentences, labels, source):
        label_index(labels, [t for s in sentences for t in s.tags], source)

    def check_scored(self, sentences, labels, source):
        """A tag the model never saw (a rare tag of a test split only) can only be predicted wrong,
        and evaluate scores it so, as seqeval and scikit-learn do, with a warning naming it;
        fine-tuning refuses it (check_gold): no training could teach it."""
        known = known_labels(labels)
        unseen = [t for s in sentences for t in s.tags if t not in known]
        listed = ", ".join(map(repr, sorted(set(unseen))[:10])) + (" ..." if len(set(unseen)) > 10 else "")
        report(len(unseen), f"{source}: {{n}} word(s) carry a tag the model never saw in training, scored as wrong: ",
               tail=listed)

    def score(self, sentences, predictions, labels):
        known = known_labels(labels)  # (gold 0, 1, ... of a model whose classes are LABEL_0, ... are those)
        gold = [[labels[known[t]] if t in known else t for t in s.tags] for s in sentences]
        return tagging_scores(gold, [p["tags"] for p in predictions], is_bio(labels))
