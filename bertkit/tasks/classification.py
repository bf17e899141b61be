"""Sequence classification, one text or a pair (BERT sec. 4.1: the [CLS] vector, through the
head's classifier), and regression (one output, mean squared error: GLUE's STS-B).

Shapes: B batch, T sequence length, C labels.
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import torch
import torch.nn.functional as F

from ..errors import BertkitError
from ..objectives.base import Objective, PerRow, Step
from .base import (Task, check_truncation, label_index, model_max_length, ordered_labels, report_truncated, run_batches,
                   truncate_pair)
from .metrics import classification_scores, multi_label_scores, regression_scores
from .readers import TextExample


def encode_texts(examples: list[TextExample], tokenizer, max_length: int,
                 truncation: str = "head") -> tuple[list[dict], int]:
    """Features (input_ids, token_type_ids) with the family's special tokens; texts (pairs) longer
    than max_length are cut, longest part first, keeping the part `truncation` names (head, tail,
    head+tail). Returns the features and how many were cut."""
    frame = tokenizer.frame
    firsts = tokenizer.encode_plain([e.text for e in examples])
    pairs = [e.text_pair is not None for e in examples]
    seconds = iter(tokenizer.encode_plain([e.text_pair for e in examples if e.text_pair is not None]))
    features, cut = [], 0
    for a, has_pair in zip(firsts, pairs):
        b = next(seconds) if has_pair else None
        a, b, was_cut = truncate_pair(a, b, max_length - frame.specials(b is not None), truncation)
        cut += was_cut
        ids, types = frame.apply(np.asarray(a), None if b is None else np.asarray(b))
        features.append({"input_ids": ids, "token_type_ids": types})
    return features, cut


class ClassificationObjective(PerRow, Objective):
    """The loss the model's problem_type names, as transformers computes it from the (B, C)
    logits: cross-entropy against (B,) class indices (single-label); binary cross-entropy of each
    label against (B, C) 0/1 targets (multi-label; (B,) indices are one label each); the mean
    squared error against (B,) or (B, C) values (regression). Without a problem_type, one output
    is regression, float targets multi-label and indices single-label, as in transformers."""

    def __init__(self, model):
        super().__init__()
        if model.head_kind != "classification":
            raise BertkitError(f"sequence classification needs a classification head, not {model.head_kind!r}")
        self.model = model
        c = model.config
        self.problem_type = c.problem_type or ("regression" if c.num_labels == 1 else None)

    def forward(self, batch: dict[str, torch.Tensor], totals: dict[str, torch.Tensor] | None = None) -> Step:
        logits = self.model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]).logits.float()
        target = batch["label"]
        kind = self.problem_type or ("multi_label_classification" if target.is_floating_point()
                                     else "single_label_classification")
        if kind == "regression":
            loss = F.mse_loss(logits.squeeze(-1) if logits.shape[-1] == 1 else logits, target.float())  # (B[, C])
            return Step(self.by_rows(loss, batch, totals), {"loss": loss.detach()})
        if kind == "multi_label_classification":
            if target.ndim == 1:
                target = F.one_hot(target.long(), logits.shape[-1])  # (B,) -> (B, C)
            loss = F.binary_cross_entropy_with_logits(logits, target.float())  # (B, C) vs (B, C)
            exact = ((logits > 0) == target.bool()).all(-1).float().mean()  # every label right
            return Step(self.by_rows(loss, batch, totals), {"loss": loss.detach(), "accuracy": exact})
        loss = F.cross_entropy(logits, target)  # (B, C) vs (B,)
        accuracy = (logits.argmax(-1) == target).float().mean()
        return Step(self.by_rows(loss, batch, totals), {"loss": loss.detach(), "accuracy": accuracy})


class SequenceClassification(Task):
    name = "classification"
    head = "classification"
    metric = "accuracy"
    metrics = ("accuracy", "f1", "mcc")

    multi_label = False  # whether the training data gives label sets (labels_of): the model trains multi-label
    model_multi_label: bool | None = None  # whether the model is multi-label, once prepare has seen it

    def __init__(self, truncation: str = "head"):
        self.truncation = check_truncation(truncation)  # which part of a text longer than max_length is kept

    def labels_of(self, examples) -> tuple[str, ...]:
        """The union of the training data's label names, in ordered_labels' order. Data with a
        label list anywhere (readers: a tuple of names) is multi-label, a plain label there being
        a one-element set: a multi-label file may write an example of one label either way."""
        self.multi_label = has_label_sets(examples)
        labels = ordered_labels((n for e in examples for n in names_of(e.label)), examples)
        if self.multi_label and not labels:  # each label a yes / no of its own: one is a problem, none is not
            raise BertkitError("the training data's label lists name no label (every one is [])")
        if len(labels) < 2 and not self.multi_label:
            raise BertkitError(f"classification needs at least two classes in the training data, found {list(labels)}")
        return labels

    def targets(self, examples, labels, source):
        """(B,) class indices, or, where the data gives label sets, a multi-hot (C,) 0/1 float
        vector per example (every example: a batch is one tensor), as transformers' multi-label
        loss takes them."""
        index = label_index(labels, [n for e in examples for n in names_of(e.label)], source)
        if not has_label_sets(examples):
            return [index[e.label] for e in examples]
        hot = []
        for e in examples:
            row = [0.0] * len(labels)
            for n in names_of(e.label):
                row[index[n]] = 1.0
            hot.append(row)
        return hot

    def prepare(self, model, max_length):
        self.model_multi_label = model.config.problem_type == "multi_label_classification"
        return super().prepare(model, max_length)

    def features(self, examples, tokenizer, labels, max_length, source):
        features, cut = encode_texts(examples, tokenizer, max_length, self.truncation)
        report_truncated(cut, len(features), max_length)
        for f, target in zip(features, self.targets(examples, labels, source)):
            f["label"] = target
        return features

    def objective(self, model):
        return ClassificationObjective(model)

    def predict(self, model, examples, batch_size=64, max_length=None, bf16=False, progress=False):
        """{"label": the most probable class, "score": its probability, "scores": every class's};
        a multi-label model (problem_type) also gives "labels", every class with probability > 0.5."""
        max_length = model_max_length(model, max_length)
        features, cut = encode_texts(examples, model.tokenizer, max_length, self.truncation)
        report_truncated(cut, len(features), max_length)
        logits = np.zeros((len(features), model.config.num_labels), dtype=np.float32)  # (N, C)
        for chunk, out in run_batches(model, features, batch_size, bf16, ("logits",), progress):
            logits[chunk] = out["logits"]
        return self.from_logits(logits, model.config.labels, model.config.problem_type == "multi_label_classification")

    def from_logits(self, logits: np.ndarray, labels, multi_label: bool = False) -> list[dict]:
        if multi_label:
            probs = 1.0 / (1.0 + np.exp(-logits))  # (N, C): each label on its own
        else:
            shifted = np.exp(logits - logits.max(-1, keepdims=True))
            probs = shifted / shifted.sum(-1, keepdims=True)  # (N, C) softmax
        best = probs.argmax(-1)
        results = [{"label": labels[k], "score": float(p[k]), "scores": {n: float(v) for n, v in zip(labels, p)}}
                   for k, p in zip(best, probs)]
        if multi_label:
            for r, p in zip(results, probs):
                r["labels"] = [n for n, v in zip(labels, p) if v > 0.5]
        return results

    def check_gold(self, examples, labels, source):
        self.targets(examples, labels, source)
        if self.model_multi_label is False:
            self._single_golds(examples, source)

    def _single_golds(self, examples, source):
        """A single-label model's predictions are one label each: gold label sets cannot be scored."""
        listed = next((n for n, e in enumerate(examples, 1) if isinstance(e.label, tuple)), None)
        if listed is not None:
            raise BertkitError(f"{source}: example {listed} gives a label list (multi-label) but the model is "
                               "single-label (one label per text); fine-tune it on the label lists first")

    def score(self, examples, predictions, labels):
        index = label_index(labels, [n for e in examples for n in names_of(e.label)], "evaluation data")
        if predictions and all("labels" in p for p in predictions):  # a multi-label model: gold sets
            gold = [[index[n] for n in names_of(e.label)] for e in examples]
            return multi_label_scores(gold, [[index[n] for n in p["labels"]] for p in predictions], len(labels))
        self._single_golds(examples, "evaluation data")
        return classification_scores([index[e.label] for e in examples], [index[p["label"]] for p in predictions],
                                     len(labels))


def names_of(label) -> tuple:
    """A classification label's names: a label set as it is, a plain label as a set of one."""
    return label if isinstance(label, tuple) else (label,)


def has_label_sets(examples) -> bool:
    """Whether any example gives a label list (multi-label data)."""
    return any(isinstance(e.label, tuple) for e in examples)


# The activations a sentence-transformers CrossEncoder folder names for its one-output score
CROSS_ENCODER_ACTIVATIONS = {"Sigmoid": lambda v: 1.0 / (1.0 + np.exp(-v)), "Tanh": np.tanh, "Identity": lambda v: v,
                             "ReLU": lambda v: max(v, 0.0)}


def cross_encoder_activation(model):
    """The score activation of a sentence-transformers CrossEncoder folder, as a function, found
    where sentence-transformers looks, in its order: config_sentence_transformers.json's
    activation_fn, config.json's sentence_transformers.activation_fn, then its
    sbert_ce_default_activation_function; a folder that names none but says it is a CrossEncoder
    gets CrossEncoder's default, a sigmoid. None for any other model; a name bertkit does not
    know is a warning and None."""
    carried = getattr(model, "carried_config", {})
    try:
        settings = json.loads(getattr(model, "companion_files", {}).get("config_sentence_transformers.json", b"{}"))
    except ValueError:  # not JSON: sentence-transformers could not read it either
        settings = {}
    settings = settings if isinstance(settings, dict) else {}
    nested = carried.get("sentence_transformers")
    names = [settings.get("activation_fn"), nested.get("activation_fn") if isinstance(nested, dict) else None,
             carried.get("sbert_ce_default_activation_function")]
    name = next((n for n in names if isinstance(n, str)), None)
    if name is None:
        return CROSS_ENCODER_ACTIVATIONS["Sigmoid"] if settings.get("model_type") == "CrossEncoder" else None
    activation = CROSS_ENCODER_ACTIVATIONS.get(name.rpartition(".")[2])
    if activation is None:
        warnings.warn(f"the model's cross-encoder activation {name} is not one bertkit applies "
                      f"({', '.join(CROSS_ENCODER_ACTIVATIONS)}); predictions give the raw value only")
    return activation


class Regression(SequenceClassification):
    """One real-valued output per text (pair); predictions are {"value": number}, or, from a model
    with several outputs (problem_type regression), {"values": {label: number}}."""

    name = "regression"
    metric = "pearson"
    metrics = ("pearson", "spearman")

    def labels_of(self, examples) -> tuple[str, ...]:
        return ("score",)

    def predict(self, model, examples, batch_size=64, max_length=None, bf16=False, progress=False):
        """{"value": the output}; a sentence-transformers CrossEncoder that names its activation
        (a sigmoid) also gives "score", the activated value CrossEncoder.predict returns."""
        results = super().predict(model, examples, batch_size, max_length, bf16, progress)
        activation = cross_encoder_activation(model)
        if activation is not None:
            for r in results:
                if "value" in r:
                    r["score"] = float(activation(r["value"]))
        return results

    def targets(self, examples, labels, source):
        values = [e.label for e in examples]
        if any(not isinstance(v, float) for v in values):
            raise BertkitError(f"{source}: regression needs numeric labels")
        return values

    def from_logits(self, logits, labels, multi_label=False):
        if logits.shape[1] > 1:
            return [{"values": {n: float(v) for n, v in zip(labels, row)}} for row in logits]
        return [{"value": float(v)} for v in logits[:, 0]]

    def check_gold(self, examples, labels, source):
        if len(labels) > 1:
            raise BertkitError(f"this regression model has {len(labels)} outputs; bertkit scores one number per "
                               "example (predict gives all of them)")
        self.targets(examples, labels, source)

    def score(self, examples, predictions, labels):
        self.check_gold(examples, labels, "evaluation data")
        # a CrossEncoder folder's score is its activated value, which sentence-transformers'
        # CrossEncoderCorrelationEvaluator scores (Pearson and the mse change under a sigmoid)
        return regression_scores([e.label for e in examples], [p.get("score", p["value"]) for p in predictions])
