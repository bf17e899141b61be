"""What every objective shares: the Step it returns and the models it saves."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import nn

from ..errors import BertkitError


@dataclass
class Step:
    loss: torch.Tensor                  # scalar, what backward() runs on
    metrics: dict[str, torch.Tensor]    # detached scalars (means over the batch) for logs


def wide(values: torch.Tensor) -> torch.Tensor:
    """Values a loss is computed from, in fp32 where they are half precision (bf16 autocast's
    logits); a float64 model's stay float64, so that its training is float64 throughout."""
    return values if values.dtype == torch.float64 else values.float()


def check_loss_weights(**values) -> None:
    """A loss's temperature must be positive and its weights at least 0, all finite numbers."""
    for key, value in values.items():
        if isinstance(value, bool) or not (isinstance(value, (int, float)) and math.isfinite(value)) or value < 0 or \
                (key == "temperature" and value == 0):
            raise BertkitError(f"{key} must be a finite number {'above' if key == 'temperature' else 'of at least'} 0, "
                               f"got {value!r}")


def share(mean: torch.Tensor, count, totals: dict[str, torch.Tensor] | None, name: str) -> torch.Tensor:
    """A loss term's part of the whole step's mean: this micro-batch's `mean` over its `count`
    items, times count / the step's total count of them (`totals[name]`, over every micro-batch and
    process); the mean itself when there are no totals (one batch, one process)."""
    if totals is None:
        return mean
    return mean * count / totals[name].clamp(min=1)


def labelled_positions(labels: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
    """(B, T) bool: where `labels` (B, T) holds a label (not -100). A label on padding is refused:
    the fast path leaves pad positions undefined (they come back as zeros), so its loss would
    differ from the padded path's and from transformers'; label padding -100, as transformers'
    collators do."""
    labelled = labels != -100
    if attention_mask is not None:
        on_padding = labelled & (attention_mask == 0)
        if on_padding.any():
            row, position = (int(i) for i in on_padding.nonzero()[0])
            raise BertkitError(f"labels: row {row}, position {position} is labelled but is padding "
                               "(attention_mask 0); give padding the label -100")
    return labelled


class PerRow:
    """For an objective whose loss is a mean over the batch's rows (sequence classification, QA
    spans, multiple choice): counts its rows, and weighs a loss by them (`share`)."""

    metric_counts = {"": "rows"}  # every logged metric (loss, accuracy) is a mean over rows

    def counts(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        ids = batch["input_ids"]
        return {"rows": torch.tensor(len(ids), device=ids.device)}

    @staticmethod
    def by_rows(loss: torch.Tensor, batch: dict[str, torch.Tensor], totals) -> torch.Tensor:
        return share(loss, len(batch["input_ids"]), totals, "rows")


class Objective(nn.Module):
    """A module whose forward(batch, totals=None) returns a Step, or the loss alone (a scalar
    tensor, logged as `loss`); a subclass of your own needs only forward() when it holds one
    bertkit model (what `models()` saves). An objective that
    averages its loss over items (masked tokens, sequences) whose number varies from batch to
    batch says how many of each each batch holds (`counts`): with gradient accumulation or several
    processes, the trainer then passes the step's `totals`, and each term is weighted by its share
    of them (`share`), so k micro-batches give the gradient of one batch k times the size (as
    transformers' num_items_in_batch does). Without counts, each micro-batch's mean weighs 1/k.

    `metric_counts` says which count each logged metric is a mean over (metric-name prefix ->
    count name, "" for any): the trainer then logs a step's metric as the mean over all its items,
    not a mean of the micro-batches' and processes' means."""

    metric_counts: dict[str, str] = {}

    def batch_keys(self) -> dict[str, str]:
        """What a batch must hold: {key: what it is}, for the error naming what is missing."""
        return {"input_ids": "(B, T) token ids"}

    def check_batch(self, batch) -> None:
        """Refuse a batch that is not a dict of tensors or lacks a key forward() reads (a
        KeyError from deep inside it otherwise)."""
        if not isinstance(batch, dict):
            raise BertkitError(f"a batch is a dict of tensors by name, not {type(batch).__name__}")
        missing = {k: what for k, what in self.batch_keys().items() if k not in batch}
        if missing:
            raise BertkitError(f"{type(self).__name__} needs the batch key(s) "
                               f"{'; '.join(f'{k!r}: {what}' for k, what in missing.items())}; this batch has "
                               f"{', '.join(map(repr, batch)) or 'nothing'}")
        for key, value in batch.items():  # (a list failed in .to(device), a short mask deep in the model)
            if not isinstance(value, torch.Tensor):
                raise BertkitError(f"batch key {key!r} is a {type(value).__name__}, not a tensor")
        ids = batch.get("input_ids")
        for key, value in batch.items():
            if ids is None or value.dim() == 0:
                continue
            same = key in ("attention_mask", "token_type_ids", "position_ids")  # (labels: the objective's own shape)
            if (tuple(value.shape) != tuple(ids.shape)) if same else (len(value) != len(ids)):
                want = f"input_ids' shape {tuple(ids.shape)}" if same else f"a row for each of input_ids' {len(ids)}"
                raise BertkitError(f"batch key {key!r} has shape {tuple(value.shape)}, not {want}")

    @contextlib.contextmanager
    def batches_checked(self) -> Iterator[None]:
        """Inside, a call does not check its batch again: the caller ran check_batch on it already
        (the trainer does, on the host, before the batch moves: on CUDA each check of the values is
        a sync). A context, not an argument, so a subclass's own __call__(batch) keeps working."""
        self._batches_checked = True
        try:
            yield
        finally:
            self._batches_checked = False

    def __call__(self, batch, *args, **kwargs) -> Step:
        """forward(batch, ...) as a Step, its batch checked first (check_batch)."""
        if not getattr(self, "_batches_checked", False):
            self.check_batch(batch)
        result = super().__call__(batch, *args, **kwargs)
        if isinstance(result, torch.Tensor):  # the loss alone
            result = Step(result, {"loss": result.detach()})
        if not isinstance(result, Step) or not isinstance(result.loss, torch.Tensor):
            raise BertkitError(f"{type(self).__name__}.forward returned {type(result).__name__}: an objective "
                               "returns its loss (a scalar tensor) or a Step(loss, metrics)")
        if result.loss.numel() != 1:
            raise BertkitError(f"{type(self).__name__}.forward returned a loss of shape {tuple(result.loss.shape)}: "
                               "a loss is one number (a mean over the batch's items)")
        return result

    def metric_count(self, metric: str) -> str | None:
        """The count `metric` is a mean over (the longest prefix of it in metric_counts), or None."""
        prefixes = [p for p in self.metric_counts if metric.startswith(p)]
        return self.metric_counts[max(prefixes, key=len)] if prefixes else None

    def counts(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor] | None:
        """The number of items each loss term averages over in `batch`; None: not counted."""
        return None

    def models(self) -> dict[str, nn.Module]:
        """What a run saves: the "" entry at the root of the output directory, others in a
        subdirectory of that name (ELECTRA: the generator in generator/). By default the one
        bertkit model the objective holds as an attribute."""
        from ..model import Model

        held = list({id(m): m for m in self.children() if isinstance(m, Model)}.values())
        if len(held) != 1:
            raise BertkitError(f"{type(self).__name__} holds {len(held)} bertkit models as attributes: say which a run "
                               'saves by defining models() -> {"": model} (others go in sub-folders by their name)')
        return {"": held[0]}
