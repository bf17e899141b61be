"""What every fine-tuning task shares: the Task interface, label sets, padding, and batches
grouped by length (for speed: a batch of similar lengths pads little).

Shapes: B batch, T sequence length (the longest in the batch), C labels.

A feature is one model input as a dict of 1-D int64 arrays (`input_ids`, `token_type_ids`, and
per task `labels` (T,) or scalars `label`, `start_positions`, `end_positions`); `collate` pads
a list of them into a batch of tensors.
"""

from __future__ import annotations

import contextlib
import numbers
import re
import sys
from dataclasses import dataclass
from decimal import Decimal
from typing import Callable

import numpy as np
import torch
from tqdm.auto import tqdm

from ..errors import BertkitError
from ..files import shown
from .readers import report, tallying, warn_tallied

IGNORE = -100  # label of positions without a loss (cross_entropy's ignore_index)


# ---- labels ---------------------------------------------------------------------------------
def ordered_labels(values, examples=None) -> tuple[str, ...]:
    """A fixed order for label names seen in training data: numbers by value ("0", "1", "2":
    index = the integer when they count from 0; "0.25" before "1.5" before "10"), a tie of one
    value ("1" and "01") by text, so the order never depends on the set's hash order (it changed
    with PYTHONHASHSEED); otherwise "O" (outside) first and the rest in alphabetical order.
    Examples from a data set that declares its classes (readers.Named) keep its names and order."""
    declared = getattr(examples, "label_names", None)
    if declared:
        return tuple(declared)
    names = set(values)
    if names and all(re.fullmatch(r"-?\d+(\.\d+)?", n) for n in names):
        return tuple(sorted(names, key=lambda n: (Decimal(n), n)))  # (exact: float ties 2**53 + 1 with 2**53)
    return tuple(sorted(names, key=lambda n: (n != "O", n)))


def check_texts(texts, name: str = "texts") -> None:
    """A list of strings, as the prediction helpers take: a bare string would be read as one text
    per character, and a number or a list inside would fail deep in the tokenizer."""
    if isinstance(texts, str) or not isinstance(texts, (list, tuple)):
        raise BertkitError(f"{name} must be a list of strings (one text: [text]), got {type(texts).__name__}")
    for n, text in enumerate(texts, 1):
        if not isinstance(text, str):
            raise BertkitError(f"{name}: item {n} is not a string but {type(text).__name__}")


def check_count(value, name: str = "batch size") -> None:
    """A count the prediction helpers take (batch size, top_k): a whole number >= 1. A batch size
    of 0 failed as range()'s ValueError, and a top_k of 0 silently gave one answer."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise BertkitError(f"{name} must be a whole number, got {value!r}")
    if value < 1:
        raise BertkitError(f"{name} must be at least 1, got {value}")


def known_labels(labels: tuple[str, ...]) -> dict[str, int]:
    """name -> index for `labels`, and for transformers' names of unnamed classes (LABEL_0, ...)
    their numbers too, so data labelled 0, 1, ... is class 0, 1, ..."""
    index = {name: i for i, name in enumerate(labels)}
    if labels == tuple(f"LABEL_{i}" for i in range(len(labels))):
        index.update({str(i): i for i in range(len(labels))})
    return index


def label_index(labels: tuple[str, ...], values, source: str) -> dict[str, int]:
    """name -> index for `labels`; a value outside them (a label never seen in training) is an
    error listing the unseen names, since no model output could ever be scored right there."""
    index = known_labels(labels)
    unseen = sorted(set(values) - set(index))
    if unseen:
        listed = ", ".join(map(repr, unseen[:10])) + (" ..." if len(unseen) > 10 else "")
        numbers = all(str(u).isdigit() for u in unseen) and not any(str(n).isdigit() for n in labels)
        hint = ("; the data gives labels by number where the model names them: write the names instead (a "
                "data set's numbers follow its own label list, which need not be the model's order)") if numbers else ""
        raise BertkitError(f"{source}: {len(unseen)} label(s) never seen in training: {listed} "
                           f"(the model knows {shown(', '.join(labels[:20]), 10**9)}"
                           f"{' ...' if len(labels) > 20 else ''}){hint}")
    return index


# ---- batches --------------------------------------------------------------------------------
def collate(features: list[dict], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-pad features into (B, T) input_ids / attention_mask / token_type_ids; per-token
    `labels` are padded with -100; scalar entries become (B,) tensors."""
    B, T = len(features), max(len(f["input_ids"]) for f in features)
    batch = {"input_ids": torch.full((B, T), pad_id, dtype=torch.long),
             "attention_mask": torch.zeros(B, T, dtype=torch.long),
             "token_type_ids": torch.zeros(B, T, dtype=torch.long)}
    for i, f in enumerate(features):
        n = len(f["input_ids"])
        batch["input_ids"][i, :n] = torch.from_numpy(f["input_ids"])
        batch["attention_mask"][i, :n] = 1
        batch["token_type_ids"][i, :n] = torch.from_numpy(f["token_type_ids"])
    first = features[0]
    if "labels" in first:
        batch["labels"] = torch.full((B, T), IGNORE, dtype=torch.long)  # (B, T)
        for i, f in enumerate(features):
            batch["labels"][i, :len(f["labels"])] = torch.from_numpy(f["labels"])
    for key in ("label", "start_positions", "end_positions"):
        if key in first:
            batch[key] = torch.tensor([f[key] for f in features])  # (B,)
    return batch


def feature_length(feature: dict) -> int:
    """A feature's token count, what batches are grouped by: its `length` where it says (one
    feature of several sequences, multiple choice: the longest), else its input_ids'."""
    return feature["length"] if "length" in feature else len(feature["input_ids"])


def length_batches(lengths: list[int], batch_size: int) -> list[list[int]]:
    """Indices grouped into batches of similar length (longest first, so an out-of-memory error
    shows at once); used for inference, where order does not matter."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]


@dataclass
class TrainBatches:
    """`batch_at(i)`: the i-th training batch, a pure function of i (the Trainer's contract). Each
    epoch is a fresh permutation (seeded by seed and epoch); inside windows of 50 batches the
    examples are sorted by length so a batch pads little, and the batches are then shuffled.
    With `accumulation` k, a step's k micro-batches are one batch of k x batch_size rows cut in k,
    so a step holds the rows `batch_size` k times larger would (the same run, as transformers'
    gradient accumulation), and an epoch is whole steps: its last, shorter step is cut in k
    parts as even as they go. `collate` makes a batch of features (multiple choice has its own).
    An epoch's last step with fewer rows than k x `min_rows` (the processes under torchrun, each
    of which needs a row) joins the step before it."""
    features: list[dict]
    batch_size: int
    pad_id: int
    seed: int = 0
    window: int = 50
    collate: Callable[[list[dict], int], dict[str, torch.Tensor]] = collate
    min_rows: int = 1
    accumulation: int = 1

    def __post_init__(self) -> None:
        if not self.features:
            raise BertkitError("no training examples")
        n, k, step = len(self.features), self.accumulation, self.batch_size * self.accumulation
        if k > 1 and n < k * self.min_rows:  # (one batch too few rows for the processes: the Trainer says)
            each = f" of at least {self.min_rows} rows (one per process)" if self.min_rows > 1 else ""
            raise BertkitError(f"{n} training example(s) cannot fill the {k} micro-batches{each} of an accumulated "
                               "step: lower the accumulation")
        self.per_epoch = (-(-n // step) - (n > step and 0 < n % step < k * self.min_rows)) * k  # micro-batches
        self._epoch = -1
        self._batches: list[list[int]] = []

    def _plan(self, epoch: int) -> list[list[int]]:
        rng = np.random.default_rng([self.seed, epoch])
        order = rng.permutation(len(self.features))
        step = self.batch_size * self.accumulation  # a step's rows
        span = step * self.window
        steps = []
        for start in range(0, len(order), span):
            chunk = sorted(order[start:start + span], key=lambda i: feature_length(self.features[i]))
            steps += [chunk[i:i + step] for i in range(0, len(chunk), step)]
        if len(steps) > 1 and len(steps[-1]) < self.accumulation * self.min_rows:  # only the last is short
            steps[-2:] = [steps[-2] + steps[-1]]
        return [list(part) for i in rng.permutation(len(steps)) for part in np.array_split(steps[i], self.accumulation)]

    def __call__(self, i: int) -> dict[str, torch.Tensor]:
        epoch, k = divmod(i, self.per_epoch)
        if epoch != self._epoch:
            self._epoch, self._batches = epoch, self._plan(epoch)
        return self.collate([self.features[j] for j in self._batches[k]], self.pad_id)


# ---- shared steps ---------------------------------------------------------------------------
TRUNCATIONS = ("head", "tail", "head+tail")


def check_truncation(truncation: str) -> str:
    if truncation not in TRUNCATIONS:
        raise BertkitError(f"unknown truncation {truncation!r}; choose one of {', '.join(TRUNCATIONS)}")
    return truncation


def keep_part(ids: list[int], n: int, truncation: str = "head") -> list[int]:
    """`n` of the tokens: the first (head), the last (tail), or the first quarter and the last
    three quarters (head+tail; Sun et al., 2019, "How to Fine-Tune BERT for Text Classification",
    sec. 5.3.1: 128 + 382 of 512 tokens was best on IMDB, where reviews sum up at the end)."""
    if len(ids) <= n or truncation == "head":
        return ids[:n]
    if truncation == "tail":
        return ids[len(ids) - n:]
    head = n // 4
    return ids[:head] + ids[len(ids) - (n - head):]


def truncate_pair(a: list[int], b: list[int] | None, budget: int,
                  truncation: str = "head") -> tuple[list[int], list[int] | None, bool]:
    """Cut two token lists to fit `budget` longest first, as transformers' truncation=True does
    (the `tokenizers` arithmetic): the longer is cut down to what the shorter leaves, and where
    that is not enough both get half, the longer (else the second) the odd token. Each keeps the
    part `truncation` names; returns the parts and whether anything was cut."""
    if len(a) + (len(b) if b is not None else 0) <= budget:
        return a, b, False
    if b is None:
        return keep_part(a, budget, truncation), None, True
    short, long = sorted((len(a), len(b)))
    long = short if short > budget else max(short, budget - short)
    if short + long > budget:
        short, long = budget // 2, budget - budget // 2
    la, lb = (long, short) if len(a) > len(b) else (short, long)
    return keep_part(a, la, truncation), keep_part(b, lb, truncation), True


def report_truncated(count: int, total: int, max_length: int, what: str = "texts") -> None:
    report(count, f"{{n}} of {{total}} {what} were longer than {max_length} tokens and were truncated", total)


def device_of(model) -> torch.device:
    return next(model.parameters()).device


class Task:
    """A fine-tuning task: its head, how examples become features, the objective it trains, how
    predictions are made and scored. `metrics` are the scores early stopping may follow (higher
    is better), `metric` the one it follows by default."""

    name: str
    head: str | None
    metric: str
    metrics: tuple[str, ...]
    length = 128  # tokens per example unless max_length says (at most the model's maximum)
    collate = staticmethod(collate)  # features -> a batch of tensors

    def prepare(self, model, max_length: int | None) -> int:
        """The sequence length for `model` (`max_length`, else the task's default, checked against
        the model), once the model is known; a task may also set itself up for the model here."""
        return model_max_length(model, max_length, self.length)

    def metric_for(self, labels: tuple[str, ...]) -> str:
        """The default dev score for a model with these labels."""
        return self.metric

    def labels_of(self, examples) -> tuple[str, ...]:
        """The label names a model for this data needs (from the training examples)."""
        raise NotImplementedError

    def features(self, examples, tokenizer, labels: tuple[str, ...], max_length: int, source: str) -> list[dict]:
        """Training features, labels included."""
        raise NotImplementedError

    def objective(self, model):
        raise NotImplementedError

    def predict(self, model, examples, batch_size: int = 64, max_length: int | None = None,
                bf16: bool = False, progress: bool = False) -> list[dict]:
        """One plain dict per example (what a CLI prints as a JSON line); `progress` shows a bar
        over the batches."""
        raise NotImplementedError

    def snapshot(self, model) -> dict:
        """A copy (on the CPU) of what training changes, for early stopping to keep the best."""
        return {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}

    def restore(self, model, state: dict) -> None:
        """Put a `snapshot` back."""
        with torch.no_grad():
            model.load_state_dict(state)

    def check_inputs(self, model, examples, max_length: int | None = None) -> None:
        """Refuse inputs predict() would refuse part way (a task that checks them as it goes): a
        prediction streamed a window at a time fails at the call, naming the input in the whole."""

    def check_gold(self, examples, labels: tuple[str, ...], source: str) -> None:
        """Refuse evaluation data a model with these labels cannot be scored on (a label it does
        not know, a missing answer), before any time goes into predicting."""

    def check_scored(self, examples, labels: tuple[str, ...], source: str) -> None:
        """check_gold for evaluate, where a task may score what fine-tuning refuses."""
        self.check_gold(examples, labels, source)

    def score(self, examples, predictions: list[dict], labels: tuple[str, ...]) -> dict[str, float]:
        raise NotImplementedError


def serving_length(model) -> int:
    """The longest input a model reads when nothing says otherwise, where transformers' pipelines
    cut it: its tokenizer's model_max_length, at most what its position table holds."""
    limit = model.backbone.embeddings.max_length
    saved = model.tokenizer.config.get("model_max_length") if model.tokenizer is not None else None
    return min(saved, limit) if isinstance(saved, int) and saved >= 8 else limit


def model_max_length(model, max_length: int | None, default: int = 512) -> int:
    """The sequence length to use: `max_length` if given (an error if the model cannot take it),
    otherwise the model's maximum, at most `default`."""
    limit = model.backbone.embeddings.max_length
    if max_length is None:
        return min(limit, default)
    if max_length > limit:
        raise BertkitError(f"max_length {max_length} is longer than this model can take ({limit} tokens)")
    if max_length < 8:
        raise BertkitError(f"max_length must be at least 8, got {max_length}")
    return max_length


def leave_bar() -> bool:
    """Whether a finished bar stays: in a log file, where erasing it only leaves its last redraw
    (0% when the work ended within tqdm's 30 s interval there), it stays, drawn at the end; on a
    terminal it goes."""
    return not sys.stderr.isatty()


@torch.no_grad()
def run_batches(model, features: list[dict], batch_size: int, bf16: bool, fields: tuple[str, ...],
                progress: bool = False, collate_fn=collate):
    """Run the model over features in length-sorted batches; yields (indices, {field: (B, T, ...)
    float32 numpy array}) for each batch, with the feature indices it covers. Over more than
    one batch the weights are prepacked for the run (`serving`). `collate_fn` makes the batches."""
    from ..model import evaluating

    device = device_of(model)
    pad_id = model.tokenizer.pad_token_id
    chunks = length_batches([feature_length(f) for f in features], batch_size)
    with evaluating(model):
        with serving(model, len(chunks), bf16):
            for chunk in tqdm(chunks, disable=not progress, desc="predicting", unit="batch",
                              leave=leave_bar()):
                batch = collate_fn([features[i] for i in chunk], pad_id)
                with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
                    out = model(batch["input_ids"].to(device), batch["attention_mask"].to(device),
                                batch["token_type_ids"].to(device))
                yield chunk, {name: getattr(out, name).float().cpu().numpy() for name in fields}


STREAM_BATCHES = 8  # batches per window of streamed predictions


def streamed(model, items: list, batch_size: int, bf16: bool, predict: Callable[[list], list],
             progress: bool = False, desc: str = "predicting"):
    """predict(part) over `items` a window of STREAM_BATCHES batches at a time, yielding each
    window's results, in input order, as soon as it is done: the CLI writes its lines as they
    come, so `| head` answers at once and a Ctrl-C keeps what was written, and results are held
    in memory a window at a time. Length-sorted batching happens within a window. For
    the whole run the model is prepacked once (`serving`; a model in eval mode), one bar counts
    the inputs, and counted warnings (texts truncated) come once, summed (`tallying`), at the end."""
    from ..model import evaluating

    window, counts = batch_size * STREAM_BATCHES, {}
    # a model in training mode is put in eval mode for each window's work alone, not across the
    # yields (two streams ending out of order left it in eval mode); it then packs per window
    packing = serving(model, -(-len(items) // batch_size), bf16) if not model.training else contextlib.nullcontext()
    try:
        with packing, tqdm(total=len(items), disable=not progress, desc=desc, unit="input", leave=leave_bar()) as bar:
            for start in range(0, len(items), window):
                part = items[start:start + window]
                with tallying(counts), evaluating(model):
                    results = predict(part)
                bar.update(len(part))
                yield from results
    finally:  # (also when the caller stops early: what was read so far)
        warn_tallied(counts)


def serving(model, batches: int, bf16: bool = False):
    """The context an inference loop of `batches` batches runs in: Model.prepacked() (for
    autocast to bf16 if `bf16`) when there is more than one, else nothing. Packing costs about
    one small batch (bert-base: 40 ms for bf16 copies, 140 ms in fp32) and saves 5-8% of every
    batch after it. Measured on the 2-core EPYC, bert-base over 512 sentences of 20-128 tokens in
    batches of 64, three runs each: under bf16 autocast 19.8-21.0 s unpacked, 18.9-19.0 s
    packed; in fp32 39.1-40.5 s and 36.8-39.4 s, the same numbers."""
    return model.prepacked(bf16) if batches > 1 else contextlib.nullcontext()
