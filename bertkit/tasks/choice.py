"""Multiple choice (BERT sec. 4.4, SWAG): a context and C candidate answers become C sequences,
"[CLS] context [SEP] choice [SEP]", scored with one number each; a softmax over the C numbers
picks the answer. The head is the family's sentence classifier with a single output
(heads.py), shared by every choice, so any number of choices works.

Examples may have different numbers of choices: a batch holds as many as its largest example,
and the missing ones are empty sequences whose logits are set to -inf before the softmax (no
loss, no probability).

Shapes: B batch, C choices (the most in the batch), T sequence length.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from ..errors import BertkitError
from ..objectives.base import Objective, PerRow, Step
from .base import Task, check_truncation, model_max_length, report_truncated, run_batches, truncate_pair
from .readers import ChoiceExample


def encode_choices(examples: list[ChoiceExample], tokenizer, max_length: int,
                   truncation: str = "head") -> tuple[list[dict], int]:
    """One feature per example: `choices`, a list of (input_ids, token_type_ids) per choice
    (context and choice as a pair, cut longest first to max_length, keeping the part
    `truncation` names), and `length`, its longest. Returns the features and how many
    context-choice pairs were cut."""
    frame = tokenizer.frame
    contexts = tokenizer.encode_plain([e.text for e in examples])
    answers = iter(tokenizer.encode_plain([c for e in examples for c in e.choices]))
    features, cut = [], 0
    for example, context in zip(examples, contexts):
        pairs = []
        for _ in example.choices:
            a, b, was_cut = truncate_pair(context, next(answers), max_length - frame.specials(True), truncation)
            cut += was_cut
            pairs.append(frame.apply(np.asarray(a), np.asarray(b)))
        features.append({"choices": pairs, "length": max(len(ids) for ids, _ in pairs)})
    return features, cut


def collate_choices(features: list[dict], pad_id: int) -> dict[str, torch.Tensor]:
    """(B, C, T) input_ids / attention_mask / token_type_ids, right-padded in both C and T, the
    (B, C) bool `choice_mask` of real choices and, when the features have one, the (B,) `label`."""
    B = len(features)
    C = max(len(f["choices"]) for f in features)
    T = max(f["length"] for f in features)
    batch = {"input_ids": torch.full((B, C, T), pad_id, dtype=torch.long),
             "attention_mask": torch.zeros(B, C, T, dtype=torch.long),
             "token_type_ids": torch.zeros(B, C, T, dtype=torch.long),
             "choice_mask": torch.zeros(B, C, dtype=torch.bool)}
    for i, f in enumerate(features):
        for j, (ids, types) in enumerate(f["choices"]):
            n = len(ids)
            batch["input_ids"][i, j, :n] = torch.from_numpy(ids)
            batch["attention_mask"][i, j, :n] = 1
            batch["token_type_ids"][i, j, :n] = torch.from_numpy(types)
            batch["choice_mask"][i, j] = True
    if "label" in features[0]:
        batch["label"] = torch.tensor([f["label"] for f in features])  # (B,)
    return batch


class ChoiceObjective(PerRow, Objective):
    """Cross-entropy of the (B, C) choice logits (missing choices at -inf) against the (B,) index
    of the right one."""

    def __init__(self, model):
        super().__init__()
        if model.head_kind != "multiple-choice":
            raise BertkitError(f"multiple choice needs a multiple-choice head, not {model.head_kind!r}")
        self.model = model

    def forward(self, batch: dict[str, torch.Tensor], totals: dict[str, torch.Tensor] | None = None) -> Step:
        logits = self.model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]).logits.float()
        logits = logits.masked_fill(~batch["choice_mask"], float("-inf"))  # (B, C)
        loss = F.cross_entropy(logits, batch["label"])
        accuracy = (logits.argmax(-1) == batch["label"]).float().mean()
        return Step(self.by_rows(loss, batch, totals), {"loss": loss.detach(), "accuracy": accuracy})


class MultipleChoice(Task):
    name = "multiple-choice"
    head = "multiple-choice"
    metric = "accuracy"
    metrics = ("accuracy",)
    collate = staticmethod(collate_choices)

    def __init__(self, truncation: str = "head"):
        self.truncation = check_truncation(truncation)

    def labels_of(self, examples) -> tuple[str, ...]:
        """No label names: a choice is an index, and the head has one output whatever C is."""
        return ()

    def features(self, examples, tokenizer, labels, max_length, source):
        if any(e.label is None for e in examples):
            raise BertkitError(f"{source}: training examples need the index of the right choice")
        features = self._encoded(examples, tokenizer, max_length)
        for f, e in zip(features, examples):
            f["label"] = e.label
        return features

    def _encoded(self, examples, tokenizer, max_length) -> list[dict]:
        """encode_choices, with one counted warning for the context-choice pairs it cut."""
        features, cut = encode_choices(examples, tokenizer, max_length, self.truncation)
        report_truncated(cut, sum(len(e.choices) for e in examples), max_length, "context-choice pairs")
        return features

    def objective(self, model):
        return ChoiceObjective(model)

    def predict(self, model, examples, batch_size=64, max_length=None, bf16=False, progress=False):
        """{"choice": the index of the most probable choice, "answer": its text, "score": its
        probability, "scores": every choice's}. A batch of examples counts their choices against
        batch_size: B * C sequences run at once."""
        max_length = model_max_length(model, max_length)
        features = self._encoded(examples, model.tokenizer, max_length)
        widest = max(len(e.choices) for e in examples)
        logits = np.full((len(features), widest), -np.inf, dtype=np.float32)  # (N, C)
        per_batch = max(1, batch_size // widest)
        for chunk, out in run_batches(model, features, per_batch, bf16, ("logits",), progress, self.collate):
            scores = out["logits"]  # (B, C') with C' the batch's most choices
            logits[chunk, :scores.shape[1]] = scores
        results = []
        for e, row in zip(examples, logits):
            row = row[:len(e.choices)]
            probs = np.exp(row - row.max())
            probs /= probs.sum()
            best = int(probs.argmax())
            results.append({"choice": best, "answer": e.choices[best], "score": float(probs[best]),
                            "scores": [float(p) for p in probs]})
        return results

    def check_gold(self, examples, labels, source):
        if any(e.label is None for e in examples):
            raise BertkitError(f"{source}: every example needs the index of the right choice")

    def score(self, examples, predictions, labels):
        self.check_gold(examples, labels, "evaluation data")
        gold = [e.label for e in examples]
        return {"accuracy": float(np.mean([p["choice"] == g for p, g in zip(predictions, gold)]))}
