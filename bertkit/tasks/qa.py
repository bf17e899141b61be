"""Extractive question answering (BERT sec. 4.2 and 4.3): the model scores every token as the
start and as the end of the answer span, in SQuAD v1.1 form (an answer is always a span of the
context) and v2.0 form (a question may have no answer: the [CLS] position stands for "none").

Long contexts are cut into windows: [CLS] question [SEP] context-window [SEP], consecutive
windows overlapping by `doc_stride` tokens, so an answer cut by one window's edge lies whole in
the next. A training window that does not hold the whole answer (and every window of an
unanswerable question) points start and end at [CLS], position 0.

Post-processing takes, in every window, the n_best start and end tokens, keeps spans with
start <= end and at most max_answer_length tokens, scores them start + end logit, and maps the
best back through the tokenizer's character offsets to the exact span of the original context.
When no such span lies in the context (a long question beside a short context fills the n-best),
the n-best of the context tokens alone are taken instead, as transformers' pipeline takes them.
For v2, the null score is the smallest [CLS] start + end over the windows; the answer is empty
when it beats the best span by more than null_threshold (Devlin et al.'s v2 rule).

Shapes: B batch, T sequence length, W window tokens, N windows of one example.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from ..errors import BertkitError
from ..objectives.base import Objective, PerRow, Step
from .base import Task, model_max_length, run_batches
from .metrics import squad_scores
from .readers import QAExample, report


@dataclass(frozen=True)
class Windowing:
    max_length: int = 384
    doc_stride: int | None = None  # tokens shared by consecutive windows; None: 128, at most half the context
                                   # a window holds beside the example's own question
    max_query_length: int = 64     # longer questions are cut

    def stride(self, specials: int, question: int | None = None) -> int:
        """The doc stride: as given, else 128 (run_qa's), at most half the context a window holds
        beside a question of `question` tokens (the example's own, so that no other example in
        the call changes its windows; default max_query_length), as transformers' pipeline
        halves short windows."""
        if self.doc_stride is not None:
            return self.doc_stride
        question = self.max_query_length if question is None else question
        return min(128, (self.max_length - specials - question) // 2)


def _layout(frame) -> tuple[int, int]:
    """(specials before the question, specials between question and context) in the pair frame."""
    parts = [p for p, _ in frame.pair]
    if "A" not in parts or "B" not in parts or parts.index("A") > parts.index("B"):
        raise BertkitError("the tokenizer's pair layout is not question-then-context")
    if parts[0] in ("A", "B"):
        raise BertkitError("the tokenizer puts no special token first, so there is no [CLS] for 'no answer'")
    a, b = parts.index("A"), parts.index("B")
    return a, b - a - 1


def _encoded(examples: list[QAExample], tokenizer) -> tuple[list[list[int]], list]:
    """Each question's ids (leading white space dropped as run_qa drops it: byte-level BPE would
    make a token of it), and each context's ids with their character offsets."""
    return (tokenizer.encode_plain([e.question.lstrip() for e in examples]),
            tokenizer.encode_offsets([e.context for e in examples]))


def _check_windows(examples: list[QAExample], questions: list, contexts: list, specials: int, w: Windowing) -> None:
    """The errors windows() gives for these examples: no room for context, a stride too long, a
    context without a token (numbered in `examples`)."""
    # the longest question, as cut: run_qa budgets each window by its own question, not the cap
    longest = min(w.max_query_length, max(map(len, questions), default=0))
    room = w.max_length - specials - longest  # context tokens a window beside it holds
    if room < 1:
        raise BertkitError(f"max_length {w.max_length} leaves no context after {specials} special tokens and a "
                           f"question of {longest} tokens; raise max_length or lower max_query_length")
    if w.doc_stride is not None and (w.doc_stride < 0 or room - w.doc_stride < 1):
        raise BertkitError(f"doc_stride must be at least 0 and below the {room} context tokens a window holds "
                           f"(max_length {w.max_length}, the longest question {longest} tokens), got {w.doc_stride}")
    empty = next((k for k, ids in enumerate(contexts) if not len(ids)), None)
    if empty is not None:
        named = f" (id {examples[empty].id!r})" if examples[empty].id != str(empty) else ""
        raise BertkitError(f"question {empty + 1}{named}: its context holds no token (only characters the "
                           "tokenizer drops, such as zero-width ones)")


def check_windows(examples: list[QAExample], tokenizer, w: Windowing) -> None:
    """windows()'s errors for all the examples at once, no window built: predictions that stream
    a window of examples at a time check the whole input first."""
    questions, contexts = _encoded(examples, tokenizer)
    _check_windows(examples, questions, [ids for ids, _ in contexts], tokenizer.frame.specials(True), w)


def windows(examples: list[QAExample], tokenizer, w: Windowing) -> tuple[list[dict], int, int]:
    """One feature per window: input_ids, token_type_ids, `example` (index), `context_start`
    (position of the window's first context token) and `offsets` (W, 2), the character span of
    each window token in the context. With answers (training) also start_positions and
    end_positions. Returns the features, how many answers fit in no window, and how many of
    those hold no token at all (characters the tokenizer drops, a zero-width space): no window
    length would hold them."""
    frame = tokenizer.frame
    before, between = _layout(frame)
    specials = frame.specials(True)
    questions, contexts = _encoded(examples, tokenizer)
    _check_windows(examples, questions, [ids for ids, _ in contexts], specials, w)
    features, lost, tokenless = [], 0, 0
    for k, (example, question, (ids, offsets)) in enumerate(zip(examples, questions, contexts)):
        question = np.asarray(question[:w.max_query_length], dtype=np.int64)
        ids, offsets = np.asarray(ids, dtype=np.int64), np.asarray(offsets, dtype=np.int64).reshape(-1, 2)
        budget = w.max_length - specials - len(question)
        # each example's own question sizes its stride, so its windows do not depend on the others
        stride = w.stride(specials, len(question))
        context_start = before + len(question) + between
        starts = [0]
        while starts[-1] + budget < len(ids):
            starts.append(starts[-1] + budget - stride)
        answer = example.answers[0] if example.answers and not example.is_impossible else None
        found = False
        for start in starts:
            span = offsets[start:start + budget]  # (W, 2)
            input_ids, types = frame.apply(question, ids[start:start + budget])
            feature = {"input_ids": input_ids, "token_type_ids": types, "example": k,
                       "context_start": context_start, "offsets": span}
            if answer is not None:
                s, e = answer_tokens(span, answer.start, answer.end)
                found |= s >= 0
                feature["start_positions"] = context_start + s if s >= 0 else 0
                feature["end_positions"] = context_start + e if s >= 0 else 0
            elif example.is_impossible:
                feature["start_positions"] = feature["end_positions"] = 0
            features.append(feature)
        lost += answer is not None and not found
        tokenless += answer is not None and not found and answer_tokens(offsets, answer.start, answer.end)[0] < 0
    return features, lost, tokenless


def answer_tokens(offsets: np.ndarray, start: int, end: int) -> tuple[int, int]:
    """(first, last) window token of the character span [start, end), or (-1, -1) when the window
    does not hold all of it."""
    if len(offsets) == 0 or offsets[0, 0] > start or offsets[-1, 1] < end:
        return -1, -1
    first = int(np.argmax(offsets[:, 1] > start))        # first token ending after the answer starts
    last = int(len(offsets) - 1 - np.argmax(offsets[::-1, 0] < end))  # last token starting before it ends
    if offsets[first, 1] <= start or offsets[last, 0] >= end or first > last:
        return -1, -1
    return first, last


class SpanObjective(PerRow, Objective):
    """Mean of the start and end cross-entropies over the (B, T) logits (BERT sec. 4.2), the
    softmax taken over each row's real tokens. (transformers' takes it over the padding too, whose
    logits are whatever pad tokens compute, so its loss changes with how much a batch is padded;
    with no padding the two are equal.) Padding scores -inf, so it is the same on the packed and the
    padded path. As transformers leaves a position past the batch's width out of the loss (an
    answer a window cut off), a position at or past its own row's real tokens is left out here,
    padding or not, so a row counts alike in any batch (its loss would be infinite on padding); a
    negative one is clamped to 0. Positions may be (B,) or (B, 1), as transformers takes them."""

    def __init__(self, model):
        super().__init__()
        if model.head_kind != "qa":
            raise BertkitError(f"extractive QA needs a qa head, not {model.head_kind!r}")
        self.model = model

    def forward(self, batch: dict[str, torch.Tensor], totals: dict[str, torch.Tensor] | None = None) -> Step:
        out = self.model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
        pad = ~batch["attention_mask"].bool()                           # (B, T)
        T, real = pad.shape[1], (~pad).sum(1)                           # (B,) each row's real tokens
        positions = []
        for name in ("start_positions", "end_positions"):
            at = batch[name]
            at = (at.squeeze(-1) if at.dim() > 1 else at).long().clamp(min=0)  # (B,)
            positions.append(torch.where(at < real, at, T))  # T: left out (ignore_index)
        start = out.start_logits.float().masked_fill(pad, float("-inf"))  # (B, T)
        end = out.end_logits.float().masked_fill(pad, float("-inf"))      # (B, T)
        loss = (F.cross_entropy(start, positions[0], ignore_index=T)
                + F.cross_entropy(end, positions[1], ignore_index=T)) / 2
        exact = ((start.argmax(-1) == positions[0]) & (end.argmax(-1) == positions[1])).float()
        return Step(self.by_rows(loss, batch, totals), {"loss": loss.detach(), "span_accuracy": exact.mean()})


@dataclass(frozen=True)
class Decoding:
    n_best: int = 20
    max_answer_length: int = 30     # tokens
    null_answers: bool = False      # SQuAD v2: the empty answer is allowed
    null_threshold: float = 0.0     # predict "" when null score - best span score > this


def _trim(context: str, start: int, end: int) -> tuple[int, int]:
    """Drop whitespace a token's offsets may include at the span's edges (byte-level BPE)."""
    while start < end and context[start].isspace():
        start += 1
    while end > start and context[end - 1].isspace():
        end -= 1
    return start, end


def best_answers(examples: list[QAExample], features: list[dict], start_logits: list[np.ndarray],
                 end_logits: list[np.ndarray], d: Decoding = Decoding(), top_k: int = 1) -> list[dict]:
    """One answer per example from its windows' logits (each (T,) for its feature):
    {"id", "answer", "start", "end" (characters of the context; None for no answer), "score"
    (softmax over the n-best and, for v2, the null answer)}; with top_k > 1 also "alternatives".
    As run_qa's post-processing, the n-best holds a span once per window that proposes it (the
    softmax shares among them); the answers listed name each span once, with its best share."""
    by_example: dict[int, list[int]] = {}
    for i, f in enumerate(features):
        by_example.setdefault(f["example"], []).append(i)
    results = []
    for k, example in enumerate(examples):
        mine = [features[i] for i in by_example.get(k, [])]
        logits = [(start_logits[i], end_logits[i]) for i in by_example.get(k, [])]
        null = min((float(s[0] + e[0]) for s, e in logits), default=np.inf)
        nullable = bool(d.null_answers and np.isfinite(null))
        spans = _spans(example.context, mine, logits, d, in_context=False)
        if not spans and not nullable:
            # every n-best position of every window fell outside the context (a long question
            # beside a short context): the best spans of the context instead, as transformers'
            # QA pipeline takes them, not an empty answer a v1 model cannot give
            spans = _spans(example.context, mine, logits, d, in_context=True)
        # run_qa cuts the n-best with the null answer among them and adds it back if cut
        ranked = sorted(spans + [(None, null)] * nullable, key=lambda item: -item[1])[:d.n_best]  # (stable)
        candidates = [{"answer": example.context[span[0]:span[1]], "start": span[0], "end": span[1], "score": score}
                      for span, score in ranked if span is not None]
        if nullable:
            null_candidate = {"answer": "", "start": None, "end": None, "score": null}
            if not candidates or null - candidates[0]["score"] > d.null_threshold:
                candidates.insert(0, null_candidate)
            else:  # the best span answers; the null answer is listed among the others at its score's rank
                rest = sorted(candidates[1:] + [null_candidate], key=lambda c: -c["score"])  # (stable)
                candidates = candidates[:1] + rest
        if not candidates:
            candidates = [{"answer": "", "start": None, "end": None, "score": 0.0}]
        scores = np.array([c["score"] for c in candidates], dtype=np.float64)
        probs = np.exp(scores - scores.max())
        probs /= probs.sum()
        listed: dict[tuple, dict] = {}
        for c, p in zip(candidates, probs):  # a span overlapping windows proposed again: listed once
            listed.setdefault((c["start"], c["end"]), {**c, "score": float(p)})
        candidates = list(listed.values())
        result = {"id": example.id, **candidates[0]}
        if top_k > 1:
            result["alternatives"] = candidates[1:top_k]
        results.append(result)
    return results


def _spans(context: str, features: list[dict], logits: list[tuple[np.ndarray, np.ndarray]], d: Decoding,
           in_context: bool) -> list[tuple[tuple[int, int], float]]:
    """((start, end) characters, start + end logit) for every allowed pair of each window's n-best
    start and end tokens: the n-best of the whole window kept where they fall in the context (as
    run_qa picks them), or, `in_context`, the n-best of the context tokens alone."""
    spans = []
    for f, (start_logits, end_logits) in zip(features, logits):
        offsets, cs = f["offsets"], f["context_start"]
        starts = start_logits[cs:cs + len(offsets)]  # (W,)
        ends = end_logits[cs:cs + len(offsets)]      # (W,)
        if in_context:
            best_starts = np.argsort(-starts, kind="stable")[:d.n_best]
            best_ends = np.argsort(-ends, kind="stable")[:d.n_best]
        else:
            best_starts = [s - cs for s in np.argsort(-start_logits, kind="stable")[:d.n_best] if 0 <= s - cs < len(offsets)]
            best_ends = [e - cs for e in np.argsort(-end_logits, kind="stable")[:d.n_best] if 0 <= e - cs < len(offsets)]
        for s in best_starts:
            for e in best_ends:
                if e < s or e - s + 1 > d.max_answer_length:
                    continue
                span = _trim(context, int(offsets[s, 0]), int(offsets[e, 1]))
                if span[1] > span[0]:
                    spans.append((span, float(starts[s] + ends[e])))
    return spans


class QuestionAnswering(Task):
    name = "qa"
    head = "qa"
    metric = "f1"
    metrics = ("exact_match", "f1")
    length = 384

    def __init__(self, windowing: Windowing | None = None, decoding: Decoding = Decoding()):
        self.windowing = windowing  # None: Windowing() with the model's max_length
        self.decoding = decoding

    def labels_of(self, examples) -> tuple[str, ...]:
        return ("start", "end")

    def _windowing(self, max_length: int) -> Windowing:
        w = self.windowing or Windowing()
        return Windowing(max_length, w.doc_stride, w.max_query_length)

    def check_inputs(self, model, examples, max_length=None):
        check_windows(examples, model.tokenizer, self._windowing(model_max_length(model, max_length, default=384)))

    def features(self, examples, tokenizer, labels, max_length, source):
        features, lost, tokenless = windows(examples, tokenizer, self._windowing(max_length))
        report(lost - tokenless, f"{source}: {{n}} answer(s) fit in no window of {max_length} tokens; their "
                                 "windows point at [CLS] (no answer)")
        report(tokenless, f"{source}: {{n}} answer(s) hold no token (only characters the tokenizer drops, such as "
                          "a zero-width space); their windows point at [CLS] (no answer)")
        return [f for f in features if "start_positions" in f]

    def objective(self, model):
        return SpanObjective(model)

    def predict(self, model, examples, batch_size=64, max_length=None, bf16=False, top_k=1, progress=False):
        max_length = model_max_length(model, max_length, default=384)
        features, _, _ = windows(examples, model.tokenizer, self._windowing(max_length))
        # no training targets: a question kept for evaluation only (its gold text is nowhere in the
        # context) has none while the others do, and a batch needs them on all features or none
        features = [{k: v for k, v in f.items() if k not in ("start_positions", "end_positions")} for f in features]
        starts: list[np.ndarray] = [np.zeros(0)] * len(features)
        ends: list[np.ndarray] = [np.zeros(0)] * len(features)
        for chunk, out in run_batches(model, features, batch_size, bf16, ("start_logits", "end_logits"),
                                      progress):
            for row, i in enumerate(chunk):
                n = len(features[i]["input_ids"])
                starts[i], ends[i] = out["start_logits"][row, :n], out["end_logits"][row, :n]
        return best_answers(examples, features, starts, ends, self.decoding, top_k)

    def score(self, examples, predictions, labels):
        return squad_scores([p["answer"] for p in predictions], [e.gold_texts for e in examples])
