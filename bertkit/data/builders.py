"""Example builders: cached tokens -> framed pre-training examples (before masking).

- "packed" (DeBERTa, DistilBERT, BERT without NSP): the corpus as one stream, a separator
  between documents, cut into rows of exactly the content budget, so no position is padding
  (the stream's tail that does not fill a row is dropped and counted).
- "full-sentences" (RoBERTa, Liu et al., 2019, sec. 4.2 FULL-SENTENCES): whole sentences packed
  greedily up to the budget, crossing document boundaries with an extra separator; a sentence
  longer than a row is cut (counted).
- "nsp" (BERT, Devlin et al., 2019, sec. 3.1 task #2 and A.2): segment A = the first sentences of
  a chunk, B = the rest of the chunk (label 0, IsNext) or, half the time, sentences from a random
  other document (label 1, NotNext; the unused rest of the chunk is put back, as
  create_pretraining_data.py does). 10% of documents aim for a shorter random length (drawn once
  per document, as that script does: every chunk of such a document aims for it).
- "sop" (ALBERT, Lan et al., 2020, sec. 4.1): A and B are consecutive segments of one document,
  swapped half the time (label 1 = swapped).
- "segments" (ELECTRA, Clark et al., 2020; ExampleBuilder in the released
  build_pretraining_dataset.py): whole sentences of one document up to the length, framed as
  A and B with no label. 10% of examples aim for one segment (as single-text tasks are); the
  others give A the first sentences up to about half the target and B the rest (a chunk of one
  sentence is one segment whatever it aims for, so more than 10% are). 5% aim for a random
  shorter length. B's tokens have segment id 1, so the type-1 embedding that fine-tuned pair
  tasks read is trained (packed rows, all type 0, would leave it at its initialization). One
  change: the script can put a short sentence back into A after B has begun (its test for A does
  not ask whether B is empty), so its A and B are not always consecutive text; here A is always
  the example's first sentences and B the rest.

The pair layouts share BERT's chunking (create_instances_from_document): consecutive sentences of
one document (cut into pieces of at most half the budget) up to a target length. One change from
both released scripts: a sentence that would overshoot the length starts the next example instead
of being trimmed away (ELECTRA's script even fills to max_length before leaving room for the
special tokens, so it trims every full example).

The family's special tokens and segment ids come from the tokenizer's `Frame`, so the same
builders serve [CLS] A [SEP] B [SEP] and <s> A </s></s> B </s>. Every example table is a pure
function of the cached corpus, the settings and the seed. Shapes: B batch, T max_length,
C content tokens per row.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..config import check_field_types
from ..errors import BertkitError
from .cache import TokenizedCorpus
from .tokenizer import Frame

LAYOUTS = ("packed", "full-sentences", "nsp", "sop", "segments")
# the chance a pair example aims for a random shorter length: create_pretraining_data.py (A.2,
# kept by ALBERT) and build_pretraining_dataset.py
SHORT_SEQ_PROB = {"nsp": 0.1, "sop": 0.1, "segments": 0.05}


@dataclass(frozen=True)
class ExampleSettings:
    layout: str = "packed"
    max_length: int = 128
    short_seq_prob: float | None = None  # pair layouts: chance of a random shorter length; None: the recipe's
    seed: int = 0

    def __post_init__(self) -> None:
        check_field_types(self)
        if self.layout not in LAYOUTS:
            raise BertkitError(f"unknown example layout {self.layout!r}; choose one of {', '.join(LAYOUTS)}")
        if self.max_length < 8:
            raise BertkitError(f"max_length must be at least 8, got {self.max_length}")
        if self.short_seq_prob is not None and not 0 <= self.short_seq_prob <= 1:
            raise BertkitError(f"short_seq_prob is a probability, got {self.short_seq_prob}")

    @property
    def short_length_prob(self) -> float:
        return SHORT_SEQ_PROB.get(self.layout, 0.0) if self.short_seq_prob is None else self.short_seq_prob


@dataclass(frozen=True)
class BuildStats:
    examples: int
    long_documents: int      # documents longer than one example: split across examples
    split_sentences: int     # sentences longer than a row (or half a pair budget): cut into pieces
    truncated_tokens: int    # pair layouts: tokens trimmed to fit max_length
    dropped_tokens: int      # packed layout: the stream's tail that fills no whole row


@dataclass
class Batch:
    """Framed, right-padded examples: ids and types (B, T) int64, lengths (B,), and for nsp/sop
    the pair labels (B,)."""
    input_ids: np.ndarray
    token_type_ids: np.ndarray
    lengths: np.ndarray
    pair_labels: np.ndarray | None = None


class Examples:
    settings: ExampleSettings
    stats: BuildStats

    def __len__(self) -> int:
        return self.stats.examples

    def batch(self, indices: np.ndarray, pad_id: int) -> Batch:
        raise NotImplementedError


def build_examples(corpus: TokenizedCorpus, frame: Frame, separator_id: int,
                   settings: ExampleSettings = ExampleSettings()) -> Examples:
    if settings.layout in ("packed", "full-sentences"):
        return PackedExamples(corpus, frame, separator_id, settings)
    return PairExamples(corpus, frame, settings)


def _cut(starts: np.ndarray, ends: np.ndarray, limit: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Cut every span longer than `limit` into pieces of at most `limit`; returns the new spans
    and how many spans were cut."""
    lengths = ends - starts
    pieces = np.maximum(1, -(-lengths // limit))  # ceil, at least one piece per span
    first = np.repeat(starts, pieces)
    index = np.arange(len(first)) - np.repeat(np.cumsum(pieces) - pieces, pieces)  # piece number in its span
    new_starts = first + index * limit
    new_ends = np.minimum(new_starts + limit, np.repeat(ends, pieces))
    return new_starts, new_ends, int((pieces > 1).sum())


class PackedExamples(Examples):
    """Rows are ranges of a virtual stream: the tokens with one separator after every document
    but the last. Virtual position v of a token at real index r in document d is r + d."""

    def __init__(self, corpus: TokenizedCorpus, frame: Frame, separator_id: int, settings: ExampleSettings):
        self.corpus, self.frame, self.separator_id, self.settings = corpus, frame, separator_id, settings
        self.budget = C = settings.max_length - frame.specials(pair=False)
        doc_tokens = corpus.document_token_offsets()  # (D + 1,)
        D = corpus.num_documents
        self.separators = doc_tokens[1:-1] + np.arange(D - 1)  # (D - 1,) virtual positions
        virtual_length = corpus.num_tokens + D - 1
        long_documents = int((np.diff(doc_tokens) > C).sum())
        split = dropped = 0
        if settings.layout == "packed":
            rows = max(1, virtual_length // C)
            self.starts = np.arange(rows, dtype=np.int64) * C
            self.lengths = np.minimum(C, virtual_length - self.starts)
            dropped = virtual_length - int(self.lengths.sum())
        else:
            sent = np.asarray(corpus.sentence_offsets)
            doc_of_sentence = np.repeat(np.arange(D), np.diff(np.asarray(corpus.document_offsets)))
            starts, ends, split = _cut(sent[:-1] + doc_of_sentence, sent[1:] + doc_of_sentence, C)
            self.starts, self.lengths = _greedy_rows(starts, ends, C)
        self.stats = BuildStats(len(self.starts), long_documents, split, 0, dropped)

    def batch(self, indices: np.ndarray, pad_id: int) -> Batch:
        T, C = self.settings.max_length, self.budget
        starts, lengths = self.starts[indices], self.lengths[indices]
        v = starts[:, None] + np.arange(C)  # (B, C) virtual positions
        before = np.searchsorted(self.separators, v, side="left")  # separators before (or at) v
        is_sep = np.zeros(v.shape, dtype=bool)
        if len(self.separators):
            is_sep = self.separators[np.minimum(before, len(self.separators) - 1)] == v
        real = np.minimum(v - before, self.corpus.num_tokens - 1)
        valid = np.arange(C) < lengths[:, None]  # (B, C)
        content = np.where(is_sep, self.separator_id, np.asarray(self.corpus.tokens[real.ravel()]).reshape(v.shape))
        content = np.where(valid, content, pad_id).astype(np.int64)
        return _frame_single(self.frame, content, lengths, T, pad_id)


def _greedy_rows(starts: np.ndarray, ends: np.ndarray, C: int) -> tuple[np.ndarray, np.ndarray]:
    """FULL-SENTENCES: add sentences (virtual spans, each <= C) to the row while the row, from its
    first sentence's start to this one's end (separators included), fits in C."""
    row_starts, row_lengths = [], []
    row_start = None
    row_end = 0
    for s, e in zip(starts.tolist(), ends.tolist()):
        if row_start is not None and e - row_start <= C:
            row_end = e
            continue
        if row_start is not None:
            row_starts.append(row_start)
            row_lengths.append(row_end - row_start)
        row_start, row_end = s, e
    if row_start is not None:
        row_starts.append(row_start)
        row_lengths.append(row_end - row_start)
    return np.array(row_starts, dtype=np.int64), np.array(row_lengths, dtype=np.int64)


def _frame_single(frame: Frame, content: np.ndarray, lengths: np.ndarray, T: int, pad_id: int) -> Batch:
    """Put each row's content (B, C) between the single-sequence frame's specials, vectorized."""
    B, C = content.shape
    a = [i for i, (p, _) in enumerate(frame.single) if p == "A"][0]
    prefix, suffix = frame.single[:a], frame.single[a + 1:]
    ids = np.full((B, T), pad_id, dtype=np.int64)
    types = np.zeros((B, T), dtype=np.int64)
    for j, (p, t) in enumerate(prefix):
        ids[:, j] = p
        types[:, j] = t
    start = len(prefix)
    ids[:, start:start + C] = content
    types[:, start:start + C] = frame.single[a][1]
    rows = np.arange(B)
    for j, (p, t) in enumerate(suffix):
        ids[rows, start + lengths + j] = p
        types[rows, start + lengths + j] = t
    total = lengths + len(prefix) + len(suffix)
    types[np.arange(T) >= total[:, None]] = 0
    return Batch(ids, types, total)


class PairExamples(Examples):
    """A table of (A span, B span) in token indices and, for nsp/sop, their labels, built once
    from the corpus and seed. An empty B span is a single-segment example."""

    def __init__(self, corpus: TokenizedCorpus, frame: Frame, settings: ExampleSettings):
        self.corpus, self.frame, self.settings = corpus, frame, settings
        budget = settings.max_length - frame.specials(pair=True)
        D = corpus.num_documents
        if settings.layout == "nsp" and D < 2:
            raise BertkitError("next-sentence prediction needs a corpus of at least two documents "
                               "(the random next segment comes from another one)")
        sent = np.asarray(corpus.sentence_offsets)
        docs = np.asarray(corpus.document_offsets)
        long_documents = int((np.diff(sent[docs]) > budget).sum())
        # pieces of at most half the budget, so an A + B pair rarely needs trimming
        seg_start, seg_end, split = _cut(sent[:-1], sent[1:], max(1, budget // 2))
        doc_seg = np.searchsorted(seg_start, sent[docs], side="left")  # (D + 1,): first piece of each document
        make = _segment_table if settings.layout == "segments" else _pair_table
        spans, labels, truncated = make(seg_start.tolist(), seg_end.tolist(), doc_seg.astype(np.int64).tolist(),
                                        budget, settings, np.random.default_rng([settings.seed, 7]))
        self.table = np.array(spans, dtype=np.int64).reshape(-1, 4)  # (N, 4): a0 a1 b0 b1
        self.labels = None if labels is None else np.array(labels, dtype=np.int64)  # (N,)
        if len(self.table) == 0:
            raise BertkitError(f"the corpus gives no {settings.layout} examples (every document is a single token?)")
        self.stats = BuildStats(len(self.table), long_documents, split, truncated, 0)

    def batch(self, indices: np.ndarray, pad_id: int) -> Batch:
        T = self.settings.max_length
        rows = self.table[indices]
        ids = np.full((len(rows), T), pad_id, dtype=np.int64)
        types = np.zeros((len(rows), T), dtype=np.int64)
        lengths = np.zeros(len(rows), dtype=np.int64)
        tokens = self.corpus.tokens
        for i, (a0, a1, b0, b1) in enumerate(rows):
            x, t = self.frame.apply(tokens[a0:a1], tokens[b0:b1] if b1 > b0 else None)
            ids[i, :len(x)], types[i, :len(x)], lengths[i] = x, t, len(x)
        return Batch(ids, types, lengths, None if self.labels is None else self.labels[indices])


def _chunks(seg_start: list[int], seg_end: list[int], doc_seg: list[int], budget: int, short_prob: float,
            rng: np.random.Generator, emit: Callable[[int, int, int, int], int], per_document: bool = True) -> None:
    """The chunking loop of create_instances_from_document: per document, gather consecutive
    segments until they reach a target length (the budget, or with probability `short_prob` a
    random shorter one, drawn once per document as that function does, or for each chunk
    without `per_document`, as ELECTRA's ExampleBuilder does) or the document ends; a segment
    that would overshoot the budget starts the next chunk. `emit(d, first, last, target)` makes
    the example of segments first..last of document d and returns how many of them it used: the
    rest start the next chunk."""
    def new_target() -> int:
        return budget if rng.random() >= short_prob else int(rng.integers(2, budget + 1))

    for d in range(len(doc_seg) - 1):
        end = doc_seg[d + 1]
        target = new_target()
        chunk, length, i = doc_seg[d], 0, doc_seg[d]
        while i < end:
            length += seg_end[i] - seg_start[i]
            if length > budget and i > chunk:  # overshoot: this segment starts the next chunk
                i -= 1
                length = budget
            if i == end - 1 or length >= target:
                chunk = i = chunk + emit(d, chunk, i, target)
                length = 0
                target = target if per_document else new_target()
            else:
                i += 1


def _pair_table(seg_start: list[int], seg_end: list[int], doc_seg: list[int], budget: int,
                settings: ExampleSettings, rng: np.random.Generator) -> tuple[list, list[int], int]:
    """nsp/sop: create_instances_from_document over all documents; returns the (a0, a1, b0, b1)
    spans, their labels and the number of tokens trimmed. Besides the overshoot (module
    docstring), one change keeps labels balanced at short lengths: a one-segment chunk is split
    inside the segment (so it can still be a real next / ordered pair instead of always a random
    one)."""
    nsp = settings.layout == "nsp"
    D = len(doc_seg) - 1
    spans: list[tuple[int, int, int, int]] = []
    labels: list[int] = []
    truncated = 0

    def emit(d: int, chunk: int, i: int, target: int) -> int:
        nonlocal truncated
        n = used = i - chunk + 1
        if n >= 2:
            a_count = int(rng.integers(1, n))
            a0, a1 = seg_start[chunk], seg_end[chunk + a_count - 1]
            b0, b1 = a1, seg_end[i]
        else:  # one segment: its two halves
            a0, b1 = seg_start[i], seg_end[i]
            a1 = b0 = a0 + (b1 - a0) // 2
        label = 0
        if nsp and (rng.random() < 0.5 or a1 == a0 or b1 == b0):
            label = 1
            if n == 1:
                a1 = b1
            other = int(rng.integers(0, D - 1))
            other += other >= d
            s = int(rng.integers(doc_seg[other], doc_seg[other + 1]))
            b0, b1 = seg_start[s], seg_end[s]
            room = target - (a1 - a0)
            while s + 1 < doc_seg[other + 1] and b1 - b0 + seg_end[s + 1] - seg_start[s + 1] <= room:
                s += 1
                b1 = seg_end[s]
            used = a_count if n >= 2 else n  # put the unused segments back (A.2)
        elif not nsp:
            if a1 == a0 or b1 == b0:  # a one-token document has no order to predict
                return used
            label = int(rng.random() < 0.5)
        a0, a1, b0, b1, cut = _trim(a0, a1, b0, b1, budget, rng)
        truncated += cut
        spans.append((a0, a1, b0, b1) if nsp or label == 0 else (b0, b1, a0, a1))  # SOP: swapped order
        labels.append(label)
        return used

    _chunks(seg_start, seg_end, doc_seg, budget, settings.short_length_prob, rng, emit)
    return spans, labels, truncated


def _segment_table(seg_start: list[int], seg_end: list[int], doc_seg: list[int], budget: int,
                   settings: ExampleSettings, rng: np.random.Generator) -> tuple[list, None, int]:
    """segments: ExampleBuilder._create_example on every chunk; returns the (a0, a1, b0, b1) spans
    (b0 == b1: one segment), no labels and no trimmed tokens (a chunk fits the budget). A takes
    a chunk's segments while it is empty, while the next one keeps it under its target, or, half
    the time, while it is still under it; B takes the rest."""
    spans: list[tuple[int, int, int, int]] = []

    def emit(d: int, first: int, last: int, target: int) -> int:
        a_target = np.inf if rng.random() < 0.1 else target // 2  # 10%: one segment
        a_end, a_length = first, 0
        while a_end <= last:
            n = seg_end[a_end] - seg_start[a_end]
            if a_length and a_length + n >= a_target and not (a_length < a_target and rng.random() < 0.5):
                break
            a_end, a_length = a_end + 1, a_length + n
        a0, a1 = seg_start[first], seg_end[a_end - 1]
        spans.append((a0, a1, a1, seg_end[last]))  # a document's segments are contiguous: B starts where A ends
        return last - first + 1

    _chunks(seg_start, seg_end, doc_seg, budget, settings.short_length_prob, rng, emit, per_document=False)
    return spans, None, 0


def _trim(a0: int, a1: int, b0: int, b1: int, budget: int, rng: np.random.Generator):
    """Trim the longer segment until the pair fits (A.2: truncate_seq_pair, B on a tie, so the
    lengths it keeps are the original's), from its front or back (chosen once per segment, not per
    token as the original does)."""
    la, lb = a1 - a0, b1 - b0
    excess = la + lb - budget
    if excess <= 0:
        return a0, a1, b0, b1, 0
    # remove from the longer one down to the shorter's length, then alternately, B first
    cut_a = min(excess, la - lb) if la > lb else 0
    cut_b = min(excess, lb - la) if lb > la else 0
    rest = excess - cut_a - cut_b
    cut_a += rest // 2
    cut_b += (rest + 1) // 2
    front_a, front_b = rng.random() < 0.5, rng.random() < 0.5
    a0, a1 = (a0 + cut_a, a1) if front_a else (a0, a1 - cut_a)
    b0, b1 = (b0 + cut_b, b1) if front_b else (b0, b1 - cut_b)
    return a0, a1, b0, b1, excess
