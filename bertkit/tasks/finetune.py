"""Fine-tuning, evaluation and prediction: what `bertkit finetune / evaluate / predict` call.

    metrics = finetune("classification", "path/to/pretrained", "imdb", "imdb", "runs/imdb")
    evaluate("runs/imdb", "classification", "imdb")            # the test split of the built-in set
    classify("runs/imdb", ["A wonderful film."])                # [{"text", "label", "score", "scores"}]

`finetune` trains through the shared loop (bertkit.train.Trainer), scores the dev set from full
predictions at every evaluation (the Trainer's on_eval hook), stops early after `patience`
evaluations without a better dev score, and leaves in `out`: the best model in Hugging Face
format with its label names and tokenizer, `metrics.json` (that model's dev scores, a flat
object: accuracy, f1, mcc / pearson, spearman / exact_match, f1 ..., eval_examples, all scores
fractions), `task.json` (the task and the settings evaluate / predict reuse), the training log
metrics.jsonl (dev scores on the eval lines) and loss_curve.png. The loop's resumable checkpoint
of the last step is removed at the end: the model worth keeping is the best one, at the root.

Scores per task: classification accuracy, f1 (binary F1 of the second label for two classes,
macro F1 otherwise), mcc; regression pearson, spearman, mse; token classification accuracy (per
word) and precision / recall / f1 (entity-level, seqeval, for BIO tags; macro over tags for
plain tags); QA exact_match and f1 (SQuAD's); multiple choice accuracy; sentence embeddings
spearman and pearson (scored pairs) or accuracy and mrr (retrieval of each text's pair). Dev labels
never seen in training are an error.
Prediction helpers and evaluate() batch inputs by length and default to the max_length the
model was fine-tuned with (a model fine-tuned elsewhere: its whole length, as transformers'
pipelines read it). evaluate() also runs in the precision it was fine-tuned in, so it gives
metrics.json's scores again; the prediction helpers run in fp32 (the checkpoint's numbers, as
the pipelines give them) unless bf16=True.
"""

from __future__ import annotations

import contextlib
import json
import math
import warnings
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from ..config import PRESETS, check_field_types
from ..data.corpora import DataWarning
from ..data.tokenizer import Tokenizer, check_vocab_fits, load_tokenizer
from ..errors import BertkitError, outside_stacklevel
from ..files import (RESULT_FILES, json_safe, launch_processes, output_dir, output_file, positive_int, read_json,
                     run_lock, shown, write_text, writing)
from ..schedules import SCHEDULES, check_seed
from .base import TrainBatches, check_count, check_texts, check_truncation, serving_length, streamed
from .choice import MultipleChoice
from .classification import Regression, SequenceClassification
from .contrastive import SentenceEmbedding
from .embedding import POOLING
from .metrics import entity_spans, is_bio
from .qa import Decoding, QuestionAnswering, Windowing
from .readers import TASKS, ChoiceExample, Columns, QAExample, TaggedSentence, TextExample, load_examples, sample
from .tagging import TokenClassification, split_words

TASK_FILE = "task.json"
DEFAULT_EPOCHS = 3.0


@dataclass(frozen=True)
class FinetuneSettings:
    """How finetune() trains, the `bertkit finetune` flags by their names: length (`epochs`,
    default 3, `steps` or `time_budget`), batches (`batch_size`, `accumulation`), AdamW (`lr`
    5e-5, `weight_decay`, `clip_norm`), the schedule (`warmup` fraction, `schedule`), inputs
    (`max_length`: 128, QA 384; `truncation` head / tail / head+tail), early stopping on the dev
    set (`eval_every`, `patience`, `metric`), `seed`, `bf16`, `length_grouping` (batches of
    similar lengths, else random ones), `device`, QA's windows and answers
    (`doc_stride`, `max_query_length`, `max_answer_length`, `n_best`, `null_answers`,
    `null_threshold`), the embedding task's `pooling`, and seeded samples of the data
    (`train_limit`, `eval_limit`). Every field is type-checked when the settings are made."""
    epochs: float | None = None          # None: 3, or as many as time_budget allows when there is one
    steps: int | None = None             # optimizer steps; when given, instead of epochs
    time_budget: float | None = None     # seconds of training, as in pre-training
    batch_size: int = 32                 # per micro-batch: accumulation x batch_size examples per step
    accumulation: int = 1                # micro-batches per optimizer step (transformers' gradient_accumulation_steps)
    lr: float = 5e-5                     # BERT sec. 4 / A.3 searches 5e-5, 3e-5, 2e-5
    clip_norm: float | None = 1.0        # the gradient's global norm is clipped to this (None: not clipped)
    weight_decay: float = 0.01
    warmup: float = 0.1                  # fraction of training
    schedule: str = "linear"
    max_length: int | None = None        # None: 128 (QA 384; embedding: a sentence-transformers folder's),
                                         # at most the model's maximum
    truncation: str = "head"             # classification/regression, texts over max_length: head, tail, head+tail
    eval_every: int | None = None        # optimizer steps between dev evaluations; None: once an epoch
    patience: int | None = 3             # evaluations without a better dev score before stopping
    metric: str | None = None            # dev score to follow; None: the task's (accuracy, pearson, f1)
    seed: int = 0
    bf16: bool = False
    length_grouping: bool = True         # training batches of similar lengths (transformers' group_by_length)
    eval_batch_size: int = 64
    device: str | None = None            # None: cuda when available
    progress: bool = True
    # extractive QA
    doc_stride: int | None = None        # None: 128, at most half the context a window holds
    max_query_length: int = 64
    max_answer_length: int = 30
    n_best: int = 20
    null_answers: bool | None = None     # SQuAD v2 empty answers; None: if the training data has any
    null_threshold: float = 0.0
    # sentence embeddings
    pooling: str | None = None           # mean or cls; None: the model's sentence-transformers Pooling, else mean
    # a seeded random sample of the data (None: all of it)
    train_limit: int | None = None
    eval_limit: int | None = None

    def __post_init__(self) -> None:
        check_field_types(self)  # bf16="no", lr="1e-4": refused here, not as a TypeError mid-run
        if self.epochs is not None and not 0 < self.epochs < math.inf:  # nan and inf would pass `<= 0`
            raise BertkitError(f"epochs must be a positive number, got {self.epochs}")
        if self.clip_norm is not None and not self.clip_norm > 0:
            raise BertkitError(f"clip_norm must be positive (or None: no clipping), got {self.clip_norm}")
        for name in ("batch_size", "accumulation", "eval_batch_size", "n_best", "max_answer_length",
                     "max_query_length"):
            if getattr(self, name) < 1:
                raise BertkitError(f"{name} must be at least 1, got {getattr(self, name)}")
        for name in ("steps", "eval_every", "patience", "train_limit", "eval_limit"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise BertkitError(f"{name} must be at least 1, got {value}")
        if self.doc_stride is not None and self.doc_stride < 0:
            raise BertkitError(f"doc_stride must be >= 0, got {self.doc_stride}")
        if not math.isfinite(self.null_threshold):  # nan: never "no answer", and task.json no longer JSON
            raise BertkitError(f"null_threshold must be a finite number, got {self.null_threshold}")
        if not 0 < self.lr < math.inf:  # inf passed `> 0`, and every weight came out NaN
            raise BertkitError(f"lr must be a finite positive number, got {self.lr}")
        if not 0 <= self.weight_decay < math.inf:
            raise BertkitError(f"weight_decay must be a finite number >= 0, got {self.weight_decay}")
        # what the training loop's settings would refuse only once the model and data are loaded
        if self.time_budget is not None and not 0 < self.time_budget < math.inf:
            raise BertkitError(f"time_budget must be a positive number of seconds, got {self.time_budget}")
        if self.schedule not in SCHEDULES:
            raise BertkitError(f"unknown schedule {self.schedule!r}; choose one of {', '.join(SCHEDULES)}")
        if not 0 <= self.warmup < 1:
            raise BertkitError(f"warmup is a fraction of training in [0, 1), got {self.warmup}")
        if self.max_length is not None and self.max_length < 8:  # (its upper limit is the model's)
            raise BertkitError(f"max_length must be at least 8, got {self.max_length}")
        if self.pooling is not None and self.pooling not in POOLING:
            raise BertkitError(f"unknown pooling {self.pooling!r}; choose one of {', '.join(POOLING)}")
        check_seed(self.seed)
        check_truncation(self.truncation)


# the tasks whose long texts are cut by the truncation setting (head, tail, head+tail)
TRUNCATING_TASKS = ("classification", "regression", "multiple-choice")


# extractive QA's settings: given to another task, they would be silently unread
QA_SETTINGS = ("doc_stride", "max_query_length", "max_answer_length", "n_best", "null_answers", "null_threshold")


def check_task_settings(name: str, settings: FinetuneSettings) -> None:
    """Fine-tuning `name` reads every setting given: one of extractive QA's, changed for another
    task, is one error naming it."""
    defaults = FinetuneSettings()
    changed = [f for f in QA_SETTINGS if getattr(settings, f) != getattr(defaults, f)]
    if changed and name != "qa":
        raise BertkitError(f"{changed[0]} is a setting of the qa task, not of {name}")


def make_task(name: str, settings: FinetuneSettings = FinetuneSettings(), null_answers: bool = False):
    if settings.pooling is not None and name != "embedding":
        raise BertkitError(f"pooling is a setting of the embedding task, not of {name}")
    if name == "classification":
        return SequenceClassification(settings.truncation)
    if name == "regression":
        return Regression(settings.truncation)
    if name == "token-classification":
        return TokenClassification()
    if name == "multiple-choice":
        return MultipleChoice(settings.truncation)
    if name == "embedding":
        if settings.batch_size < 2:
            raise BertkitError("embedding needs batch_size >= 2: a pair is trained against the other pairs "
                               "of its batch")
        if settings.truncation != "head":  # embed() and sentence-transformers keep a text's start
            raise BertkitError(f"embedding keeps the start of a long text, as embedding it later does; "
                               f"truncation {settings.truncation!r} is for classification")
        return SentenceEmbedding(settings.pooling)
    if name == "qa":
        return QuestionAnswering(
            Windowing(settings.max_length or QuestionAnswering.length, settings.doc_stride, settings.max_query_length),
            Decoding(settings.n_best, settings.max_answer_length, null_answers, settings.null_threshold))
    raise BertkitError(f"unknown task {name!r}; choose one of {', '.join(TASKS)}")


# ---- models -----------------------------------------------------------------------------------
def _with_tokenizer(model, tokenizer):
    if tokenizer is not None:
        model.tokenizer = tokenizer if isinstance(tokenizer, Tokenizer) else load_tokenizer(tokenizer)
    if model.tokenizer is None:
        raise BertkitError("the model has no tokenizer: pass one (--tokenizer: a checkpoint directory, "
                           "tokenizer.json, vocab.txt, vocab.json or spm.model)")
    check_vocab_fits(model.tokenizer, model.config.vocab_size)
    return model


def model_for(task, source, labels: tuple[str, ...], tokenizer=None):
    """A model with `task`'s head for `labels`: a Model as is (one without a head: its encoder with
    a fresh head, as a directory's gets one), a preset name (fresh weights), or a
    checkpoint directory (its encoder; its head too when it already has this task's head and
    labels, or names every label of the data among its own, otherwise a new head, with a
    warning when the old one had named labels). Returns (model, labels in the model's order)."""
    from ..interop.hf import FreshHeadWarning, UnusedHeadWarning, from_pretrained, resolve
    from ..model import Model, build

    # one output per label; a span head has two outputs, a choice head one, an encoder for embeddings none
    sized = task.head in ("classification", "token-classification")
    if isinstance(source, Model):
        model = source
        if model.head_kind is None and task.head is not None:  # an encoder: a fresh head, as a directory's gets
            model = _with_fresh_head(model, task.head, len(labels) if sized else None)
        if model.head_kind != task.head:
            needs = f"a {task.head!r} head" if task.head else "an encoder without a head (load it with head=None)"
            raise BertkitError(f"the model has a {model.head_kind!r} head; {task.name} needs {needs}")
    elif str(source) in PRESETS and not Path(str(source)).exists():
        model = build(str(source), head=task.head, num_labels=len(labels) if sized else None)
        if model.tokenizer is None and tokenizer is None:  # e.g. roberta-base, also a hub id of released weights
            raise BertkitError(f"{source} is a preset: the architecture with fresh random weights and no tokenizer; "
                               "pass --tokenizer to train it from scratch, or name a checkpoint (a directory or a "
                               "Hugging Face Hub id such as FacebookAI/roberta-base) to fine-tune pre-trained weights")
    else:
        try:  # a directory, or a hub id (downloaded)
            hf = resolve(source)
        except BertkitError as e:
            raise BertkitError(f"{source}: neither a preset ({', '.join(sorted(PRESETS))}) nor a model directory "
                               f"or Hugging Face Hub id ({str(e).partition(': ')[2]})") from None
        kinds, saved_names = _saved_head(hf)
        fine_tuned = kinds & {"classification", "token-classification", "qa", "multiple-choice"}
        other_head = bool(fine_tuned) and task.head not in kinds  # (a pre-trained MLM head is left out as usual)
        if other_head:
            held = (f" of {len(saved_names)} label{'s' * (len(saved_names) > 1)} ({shown(', '.join(saved_names))})"
                    if saved_names else "")
            what = "starts a fresh head on its encoder" if task.head else "trains its encoder alone"
            warnings.warn(f"{source} holds a fine-tuned {' / '.join(sorted(fine_tuned))} head{held}; fine-tuning "
                          f"for {task.name} {what} instead", DataWarning, stacklevel=outside_stacklevel())
        # the names of this task's head (a sequence classifier's labels are not a tagger's)
        named = saved_names if sized and not (kinds and task.head not in kinds) else ()
        if named and set(labels) < set(named):  # data with some of its labels: the trained head goes on
            labels = named
        elif named and len(named) != len(labels):
            warnings.warn(f"the model's head was trained on {len(named)} label{'s' * (len(named) > 1)} "
                          f"({shown(', '.join(named))}); the data "
                          f"has {len(labels)} ({shown(', '.join(labels))}), not all among them: the head starts "
                          "fresh", DataWarning, stacklevel=outside_stacklevel())
        with warnings.catch_warnings():  # a new head is what fine-tuning starts from, not news
            warnings.simplefilter("ignore", FreshHeadWarning)
            warnings.simplefilter("ignore", UnusedHeadWarning)  # embedding: a pre-training head left out
            if other_head:  # the encoder alone: the old head's weights, matched by name and shape, carried over
                model = from_pretrained(hf, head=None)
                model = _with_fresh_head(model, task.head, len(labels) if sized else None) if task.head else model
            else:
                model = from_pretrained(hf, head=task.head, num_labels=len(labels) if sized else None)
    if sized and isinstance(source, Model) and set(labels) < set(model.config.label_names):
        labels = model.config.label_names  # (as for a directory above)
    if sized:
        if model.config.num_labels != len(labels):
            raise BertkitError(f"the model has {model.config.num_labels} outputs but the data has {len(labels)} labels")
        if set(model.config.label_names) == set(labels):
            labels = model.config.label_names  # a model fine-tuned on these labels keeps its order
        elif model.config.label_names:  # a head trained on other names: its outputs are taken over in order
            carried = ", ".join(f"{shown(a)} -> {shown(b)}" for a, b in zip(model.config.label_names, labels))
            warnings.warn(f"the model's head was trained on other labels; its outputs carry over in order "
                          f"({carried}): check that they mean the same, or fine-tune from the encoder alone",
                          DataWarning, stacklevel=outside_stacklevel())
        model.config = model.config.replace(label_names=tuple(labels))
    if task.head == "classification":  # what the training makes of the outputs, for whoever loads the model
        model.config = model.config.replace(problem_type=_problem_type(task, model))
    if task.head is not None and "modules.json" in model.companion_files:
        # a sentence-transformers embedding folder made a task model: its modules (pooling ...) no
        # longer describe it, and sentence-transformers would load the result as an embedder
        model.companion_files = {}
    return _with_tokenizer(model, tokenizer), labels


def _with_fresh_head(encoder, head: str, num_labels: int | None):
    """A new Model of `encoder`'s weights (and tokenizer, files) with a freshly initialized `head`,
    built as from_pretrained builds one on a directory's encoder, so a Model and its directory
    start from the same weights. The Model given is left as it was; the fine-tuned model is
    finetune's `out`. A pooler the encoder lacks starts fresh too, as from a directory."""
    from ..model import Model

    config = encoder.config.replace(label_names=(), problem_type=None)  # an encoder's label names (a
    if num_labels is not None:                                          # config.json's id2label) name no
        config = config.replace(num_labels=num_labels)                  # head's outputs
    model = Model(config, head, encoder.tokenizer)
    model.load_state_dict(encoder.state_dict(), strict=False)  # the head's (and perhaps a pooler's) are new
    model.companion_files, model.carried_config = encoder.companion_files, encoder.carried_config
    return model.to(device=encoder.device, dtype=encoder.dtype).train(encoder.training)


def _problem_type(task, model) -> str:
    """What fine-tuning trains a classifier as: regression for that task; multi-label where the
    data gives label sets (task.multi_label) or the model already is multi-label (its sigmoid
    outputs go on being read so, plain labels being sets of one); otherwise single-label."""
    if task.name == "regression":
        return "regression"
    if task.multi_label or model.config.problem_type == "multi_label_classification":
        return "multi_label_classification"
    return "single_label_classification"


def _saved_head(folder) -> tuple[set[str], tuple[str, ...]]:
    """(the head kinds a checkpoint's config.json names in its architectures, its id2label names
    unless only transformers' defaults LABEL_0, LABEL_1 ...); nothing where the file cannot be read
    (loading the folder names what is wrong with it)."""
    from ..interop.hf_names import HEAD_SUFFIX

    try:
        config = json.loads((Path(folder) / "config.json").read_text(encoding="utf-8"))
        id2label = config.get("id2label") or {}
        names = tuple(str(id2label[k]) for k in sorted(id2label, key=int))
        kinds = {kind for arch in config.get("architectures") or () for suffix, kind in HEAD_SUFFIX.items()
                 if isinstance(arch, str) and arch.endswith(suffix)}
    except (OSError, ValueError, TypeError, AttributeError):
        return set(), ()
    return kinds, () if names == tuple(f"LABEL_{i}" for i in range(len(names))) else names


def load_model(source, tokenizer=None):
    """A fine-tuned model from a Model or a directory (head from its config)."""
    from ..interop.hf import from_pretrained
    from ..model import Model

    model = source if isinstance(source, Model) else from_pretrained(Path(str(source)).expanduser())
    return _with_tokenizer(model, tokenizer)


def _task_settings(source) -> dict:
    """task.json of a fine-tuned directory ({} for a Model or a directory without one), its
    values checked here, so a hand-edited file is one error line naming the key, not a traceback
    from deep inside evaluation."""
    from ..options import typed

    path = Path(source).expanduser() / TASK_FILE if isinstance(source, (str, Path)) else None
    if path is None or not path.exists():
        return {}
    saved = read_json(path)
    if "task" in saved and saved["task"] not in TASKS:
        raise BertkitError(f"{path}: task {saved['task']!r} is not one of {', '.join(TASKS)}")
    settings = saved.get("settings", {})
    if not isinstance(settings, dict):
        raise BertkitError(f"{path}: settings must be an object of fine-tuning settings")
    known = {k: v for k, v in settings.items() if k in FinetuneSettings.__dataclass_fields__}
    saved["settings"] = typed(FinetuneSettings, known, f"{path} settings")
    positive_int(saved, "max_length", path)
    if not isinstance(saved.get("null_answers", False), bool):
        raise BertkitError(f"{path}: null_answers must be true or false, got {saved['null_answers']!r}")
    columns = saved.get("columns", {})
    if not (isinstance(columns, dict) and all(k in Columns.__dataclass_fields__ and isinstance(v, str) and v
                                              for k, v in columns.items())):
        raise BertkitError(f"{path}: columns must map {', '.join(Columns.__dataclass_fields__)} to column names, "
                           f"got {json.dumps(columns)[:80]}")
    return saved


def remembered_columns(source, columns: Columns, saved: dict | None = None) -> Columns:
    """`columns` with each one not given taken from those the model was fine-tuned with
    (task.json's `columns`, written when fine-tuning named any): a model fine-tuned on a `review`
    column is evaluated on the same kind of file without naming it again. `saved`: source's
    task.json, where the caller has read it already."""
    kept = (_task_settings(source) if saved is None else saved).get("columns", {})
    return Columns(**{k: v if v is not None else kept.get(k) for k, v in asdict(columns).items()})


def _regression(model) -> bool:
    """Whether a classification head's outputs are real values (as transformers' loss reads it):
    one output is, unless the model says it is a label's yes / no (multi-label)."""
    problem = model.config.problem_type
    return problem == "regression" or (model.config.num_labels == 1 and problem != "multi_label_classification")


def _task_of(model, name: str | None, saved: dict) -> str:
    if name is not None:
        return name
    if "task" in saved:
        return saved["task"]
    regression = _regression(model)
    by_head = {"classification": "regression" if regression else "classification",
               "token-classification": "token-classification", "qa": "qa", "multiple-choice": "multiple-choice"}
    if model.head_kind is None and "modules.json" in model.companion_files:
        return "embedding"  # a sentence-transformers model: its vectors are what it is for
    if model.head_kind not in by_head:
        head = f"a {model.head_kind!r} head" if model.head_kind else "no head"
        embedding = ("; for its sentence vectors: evaluate --task embedding, predict embed" if model.head_kind is None
                     else "")
        raise BertkitError(f"the model has {head}, not a fine-tuned task's; fine-tune it first (bertkit finetune)"
                           f"{embedding}")
    return by_head[model.head_kind]


def _device(settings: FinetuneSettings) -> torch.device:
    """The device asked for (None: cuda when available), checked: cuda without CUDA is one line."""
    from ..pretraining import pick_device

    return pick_device(settings.device or "auto")


# ---- fine-tuning ------------------------------------------------------------------------------
@dataclass
class EarlyStopping:
    """The on_eval hook: score the dev set from full predictions, remember the best weights,
    ask the loop to stop after `patience` evaluations without improvement."""
    task: object
    model: torch.nn.Module
    examples: list
    labels: tuple[str, ...]
    metric: str
    settings: FinetuneSettings
    max_length: int
    best: dict = field(default_factory=dict)
    best_step: int = 0
    best_state: dict | None = None
    waited: int = 0

    def __call__(self, step: int, metrics: dict) -> bool:
        s = self.settings
        with warnings.catch_warnings():
            if self.best:  # what reading the dev set repaired was reported at the first evaluation
                warnings.simplefilter("ignore", DataWarning)
            predictions = self.task.predict(self.model, self.examples, s.eval_batch_size, self.max_length, s.bf16)
        scores = self.task.score(self.examples, predictions, self.labels)
        metrics.update(scores)  # logged in metrics.jsonl with the evaluation
        if not self.best or scores[self.metric] > self.best[self.metric]:
            self.best, self.best_step, self.waited = scores, step, 0
            self.best_state = self.task.snapshot(self.model)
            return False
        self.waited += 1
        return s.patience is not None and self.waited >= s.patience


def finetune_out(out, flag: str = "--out") -> Path:
    """The folder a fine-tuning run writes, checked first: besides a finished run's files, it must
    not hold a pre-training run (job.json, checkpoints/), whose log and checkpoints this run's would
    mix with, or replace."""
    return output_dir(out, keep=(*RESULT_FILES, "job.json", "checkpoints"), flag=flag, run_logs=True)


def finetune(task: str, model, train, eval, out: str | Path, settings: FinetuneSettings = FinetuneSettings(),
             tokenizer=None, columns: Columns = Columns()) -> dict:
    """Fine-tune `model` (a Model, a preset name, or a pre-trained directory) on `train` and
    early-stop on `eval` (lists of examples, built-in names, files, or hub names; a built-in
    name gives its train split to `train` and its dev split to `eval`). Returns the dev scores
    of the best model, also written to out/metrics.json. Another run writing `out` meanwhile is
    refused (files.run_lock)."""
    if not isinstance(settings, FinetuneSettings):  # a dict failed as an AttributeError deep inside
        raise BertkitError(f"settings must be a FinetuneSettings, e.g. FinetuneSettings(steps=100), "
                           f"not a {type(settings).__name__}")
    check_task_settings(task, settings)
    out = finetune_out(out, flag="")
    with run_lock(out, flag=""):
        return _finetune(task, model, train, eval, out, settings, tokenizer, columns)


def _finetune(task: str, model, train, eval, out: Path, settings: FinetuneSettings, tokenizer,
              columns: Columns) -> dict:
    from ..train import Trainer, TrainSettings
    from ..train.loop import LostProcess, NonFiniteLoss, plot_curves

    train_examples = sample(load_examples(task, train, "train", columns), settings.train_limit, settings.seed)
    eval_examples = sample(load_examples(task, eval, "dev", columns), settings.eval_limit, settings.seed)
    if not train_examples or not eval_examples:
        raise BertkitError("no training examples" if not train_examples else "no evaluation examples")
    null_answers = settings.null_answers
    if task == "qa" and null_answers is None:
        null_answers = any(e.is_impossible for e in train_examples)
    job = make_task(task, settings, bool(null_answers))
    if task == "embedding" and settings.accumulation > 1:
        raise BertkitError("embedding trains against the other pairs of its batch, which accumulation would split "
                           "into smaller batches with fewer negatives; raise batch_size instead")
    torch.manual_seed(settings.seed)  # a new head's initial weights
    model, labels = model_for(job, model, job.labels_of(train_examples), tokenizer)
    job.check_gold(eval_examples, labels, str(eval))  # before minutes of training
    max_length = job.prepare(model, settings.max_length)
    features = job.features(train_examples, model.tokenizer, labels, max_length, str(train))
    processes = launch_processes()  # under torchrun each needs a row of every batch
    batches = TrainBatches(features, settings.batch_size, model.tokenizer.pad_token_id, settings.seed,
                           window=TrainBatches.window if settings.length_grouping else 1,  # (1: sorts within a batch)
                           collate=job.collate, min_rows=processes, accumulation=settings.accumulation)
    steps = settings.steps  # with a time budget too: whichever ends first
    per_epoch = batches.per_epoch // settings.accumulation  # optimizer steps (whole ones), for evaluations
    if steps is None and (settings.epochs is not None or settings.time_budget is None):  # at most one step over
        steps = max(1, math.ceil((settings.epochs or DEFAULT_EPOCHS) * batches.per_epoch / settings.accumulation))
    metric = settings.metric or job.metric_for(labels)
    if metric not in job.metrics:
        raise BertkitError(f"early stopping cannot follow {metric!r} for {task}; choose one of {', '.join(job.metrics)}")
    stopper = EarlyStopping(job, model, eval_examples, labels, metric, settings, max_length)
    train_settings = TrainSettings(
        steps=steps, time_budget=settings.time_budget, lr=settings.lr, weight_decay=settings.weight_decay,
        betas=(0.9, 0.999), eps=1e-8, warmup=settings.warmup, schedule=settings.schedule, bf16=settings.bf16,
        clip_norm=settings.clip_norm, accumulation=settings.accumulation,
        eval_every=settings.eval_every or per_epoch, save_every=10**9, keep=1, seed=settings.seed,
        progress=settings.progress)
    trainer = Trainer(job.objective(model), batches, train_settings, out, device=_device(settings), on_eval=stopper,
                      final_model=False)  # the best evaluation's model is saved below, not the last step's
    lost = None  # another torchrun process stopped: this one saves what the interrupt would
    try:
        trainer.fit()
        interrupted = None
    except (KeyboardInterrupt, LostProcess, NonFiniteLoss) as e:  # the best model evaluated so far is still
        lost = e if isinstance(e, LostProcess) else None  # the run's result
        if isinstance(e, NonFiniteLoss):  # (fine-tuning writes no checkpoints: the best model is what it keeps)
            if stopper.best_state is None:
                raise BertkitError(f"loss is {e.loss} at step {e.step}, before the first evaluation; stopping (no "
                                   f"model was saved; {e.why})") from None
            lost = BertkitError(f"loss is {e.loss} at step {e.step}; stopping ({e.why})")
        if stopper.best_state is None:
            what = f"{lost}, before the first evaluation: no model was saved" if lost else \
                f"at step {trainer.step}, before the first evaluation: no model was saved"
            raise (BertkitError if lost else KeyboardInterrupt)(what) from None
        interrupted = trainer.step

    with _finishing():
        try:
            if interrupted is not None and trainer.is_main:
                with contextlib.suppress(OSError):  # the run's end would have drawn it; the model matters more
                    plot_curves(trainer.log_path, out / "loss_curve.png")
            job.restore(model, stopper.best_state)
            metrics = {**stopper.best, "eval_examples": len(eval_examples), "train_examples": len(train_examples),
                       "best_step": stopper.best_step, "steps": trainer.step,
                       **({"interrupted": True} if interrupted is not None else {})}
            named = {k: v for k, v in asdict(columns).items() if v is not None}  # evaluate / predict read them too
            saved = {"task": task, "metric": metric, "max_length": max_length, "labels": list(labels),
                     **({"null_answers": bool(null_answers)} if task == "qa" else {}),
                     **({"columns": named} if named else {}),
                     "settings": {k: v for k, v in asdict(settings).items() if k not in ("progress", "device")}}
            if trainer.is_main:  # under torchrun the first process writes; the others hold the same model
                with writing("the fine-tuned model", out):  # metrics.json last: it marks a finished run
                    model.save_pretrained(out)
                    (out / TASK_FILE).write_text(json.dumps(saved, indent=2) + "\n")
                    (out / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
        except KeyboardInterrupt:  # (a second Ctrl-C said only 'interrupted', as if the first one's model were kept)
            when = f"at step {interrupted}, then again" if interrupted is not None else f"at step {trainer.step},"
            kept = (f"{out} holds its weights but not its task.json and metrics.json: delete the folder before "
                    "running again" if (out / "config.json").exists() else f"it was not saved in {out}")
            raise KeyboardInterrupt(f"{when} while the best model (step {stopper.best_step}) was being saved: "
                                    f"{kept}") from None
        if interrupted is not None:
            kept = f"the best model so far (step {stopper.best_step}, {metric} {stopper.best[metric]:.4f}) is saved in {out}"
            if lost is not None:
                raise BertkitError(f"{lost}; {kept}")
            raise KeyboardInterrupt(f"at step {interrupted}; {kept}")
    return metrics


@contextlib.contextmanager
def _finishing():
    """SIGTERM held off from the end of training while the result is written: torchrun sends it
    to every process as soon as one has stopped, which cut short the save of the best model the
    run was stopping to keep (it takes a second or two; Ctrl-C still stops it, leaving any earlier
    save whole)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


# ---- evaluation and prediction ----------------------------------------------------------------
def _prepared(source, task: str | None, tokenizer, overrides: dict, data_has_null: bool = False,
              saved: dict | None = None):
    """(model, task name, Task, settings, max_length) for a fine-tuned model: the settings it was
    trained with (task.json, or `saved`: what the caller read of it), with the non-None
    `overrides` on top."""
    saved = _task_settings(source) if saved is None else saved
    model = load_model(source, tokenizer)
    name = _task_of(model, task, saved)
    values = {k: v for k, v in saved.get("settings", {}).items() if k in FinetuneSettings.__dataclass_fields__}
    values["max_length"] = saved.get("max_length", values.get("max_length"))
    if "truncation" not in values and model.tokenizer is not None \
            and model.tokenizer.config.get("truncation_side") == "left" and name in TRUNCATING_TASKS:
        values["truncation"] = "tail"  # fine-tuned elsewhere to keep a text's end, as its tokenizer cuts
    values.update({k: v for k, v in overrides.items() if v is not None})
    settings = FinetuneSettings(**values)
    null_answers = settings.null_answers
    if null_answers is None:
        null_answers = saved.get("null_answers", data_has_null)
    job = make_task(name, settings, bool(null_answers))
    if model.head_kind != job.head and job.head is not None:  # embeddings are read off the encoder, any head
        held = f"a {model.head_kind!r} head" if model.head_kind else "no head"
        raise BertkitError(f"the model has {held} (task {saved.get('task', 'unknown')}); "
                           f"{name} needs a {job.head!r} head")
    if name in ("classification", "regression") and (name == "regression") != _regression(model):
        labels = model.config.labels
        what = ("a regression model (one output, or problem_type regression)" if _regression(model) else
                f"a classifier of {len(labels)} labels ({', '.join(labels[:4])}{', ...' if len(labels) > 4 else ''})")
        raise BertkitError(f"the model is {what}, not a {name} model: give the task "
                           f"{'regression' if _regression(model) else 'classification'}")
    length = settings.max_length
    if length is None and name not in ("qa", "embedding"):  # a model fine-tuned elsewhere: read it all, as
        length = serving_length(model)                      # pipelines do (QA: 384-token windows, as they do)
    max_length = job.prepare(model, length)
    device = _device(settings)
    if settings.bf16:
        _warn_if_emulated(device, reused=overrides.get("bf16") is None)
    model.to(device)
    return model, name, job, settings, max_length


def _warn_if_emulated(device: torch.device, reused: bool) -> None:
    """bf16 where it is only emulated, several times slower than fp32, is said: asked for
    (pretraining.warn_if_emulated_bf16), or `reused`: a model fine-tuned in bf16 (`auto` on bf16
    hardware) is evaluated in bf16, as metrics.json scored it, which was silent."""
    from ..pretraining import native_bf16, warn_if_emulated_bf16

    if not reused:
        warn_if_emulated_bf16(device)
    elif not native_bf16(device):
        warnings.warn(f"the model was fine-tuned in bf16, which this {device.type} device only emulates: evaluating "
                      "as fine-tuned runs several times slower than fp32; --precision fp32 (or bf16=False) evaluates "
                      "in fp32 (scores may then differ from metrics.json's in the third digit)",
                      stacklevel=outside_stacklevel())


def evaluate(model, task: str | None, data, split: str = "test", tokenizer=None, columns: Columns = Columns(),
             limit: int | None = None, predictions: str | Path | None = None, **overrides) -> dict:
    """Scores of a fine-tuned model (a directory or a Model) on `data` (a built-in name, whose
    `split` is used, a file or a hub name): the same flat keys as finetune's metrics.json. The
    task and the settings (max_length, bf16, QA windows and decoding) default to those the model
    was fine-tuned with (task.json); `overrides` are FinetuneSettings fields, e.g. max_length=256.
    `limit` scores a seeded random sample of that many examples. `predictions`: a file to write
    each example's prediction to as well, one JSON line per example in the data's order
    (scored_record: its input, what `predict` gives for it and its `gold` answer), written after
    scoring, atomically."""
    unknown = sorted(set(overrides) - set(FinetuneSettings.__dataclass_fields__))
    if unknown:
        raise BertkitError(f"unknown setting(s) {', '.join(unknown)}; known: "
                           f"{', '.join(FinetuneSettings.__dataclass_fields__)}")
    if predictions is not None:  # before minutes of prediction
        target = output_file(predictions, "", reads=(data,) if isinstance(data, (str, Path)) else ())
    saved = _task_settings(model)  # read once: the task, the columns and the settings
    if not (task or saved.get("task")):  # the head says; loaded once, as _prepared takes a Model as it is
        model, tokenizer = load_model(model, tokenizer), None
    name = task or saved.get("task") or _task_of(model, None, {})
    examples = sample(load_examples(name, data, split, remembered_columns(model, columns, saved)), limit)
    has_null = name == "qa" and any(e.is_impossible for e in examples)
    model, name, job, settings, length = _prepared(model, name, tokenizer, overrides, has_null, saved)
    source = str(data) if isinstance(data, (str, Path)) else "evaluation data"
    if has_null and not job.decoding.null_answers:  # each such question scores 0, without a word
        unanswerable = sum(e.is_impossible for e in examples)
        warnings.warn(f"{source}: {unanswerable} of the {len(examples)} questions have no answer (SQuAD v2), but the "
                      "model was fine-tuned to answer every question (task.json's null_answers false), so each of "
                      "them scores 0; a model fine-tuned with unanswerable questions predicts none (null_answers=True, "
                      "--null-answers, lets this one, whose head never learned to)", DataWarning,
                      stacklevel=outside_stacklevel())
    job.check_scored(examples, model.config.labels, source)  # before minutes of prediction
    predicted = job.predict(model, examples, settings.eval_batch_size, length, settings.bf16,
                            progress=settings.progress)
    scores = {**job.score(examples, predicted, model.config.labels), "eval_examples": len(examples)}
    if predictions is not None:
        lines = (json.dumps(json_safe(scored_record(e, p)), ensure_ascii=False) + "\n"
                 for e, p in zip(examples, predicted))
        write_text(target, "".join(lines), flag="")
    return scores


def scored_record(example, prediction: dict) -> dict:
    """One line of evaluate's predictions: the example's input, the prediction as `bertkit
    predict` gives it (a pair's vectors left out), then `gold`: the label (a multi-label
    example's list of them), value, tags, choice index, or a question's gold answer texts ([] for
    none: SQuAD v2's unanswerable)."""
    if isinstance(example, QAExample):
        given, gold = {"id": example.id, "question": example.question}, list(example.gold_texts)
    elif isinstance(example, TaggedSentence):
        given, gold = {}, list(example.tags)  # (the prediction's "tokens" are the words)
    elif isinstance(example, ChoiceExample):
        given, gold = {"text": example.text, "choices": list(example.choices)}, example.label
    else:
        given = {"text": example.text, **({"text_pair": example.text_pair} if example.text_pair else {})}
        gold = example.label
        if isinstance(gold, tuple) or "labels" in prediction:  # a multi-label model's: a list, as its "labels"
            gold = list(gold) if isinstance(gold, tuple) else [gold]
    return {**given, **{k: v for k, v in prediction.items() if k != "vectors"}, "gold": gold}


def classify(model, texts: list[str], text_pairs: list[str | None] | None = None, batch_size: int = 64,
             max_length: int | None = None, bf16: bool = False, tokenizer=None,
             progress: bool = False, top_k: int | None = None, stream: bool = False) -> list[dict] | Iterator[dict]:
    """{"text", ("text_pair"), "label", "score", "scores"} per text (a regression model: "value").
    "scores" holds every class's probability in the model's order, or with `top_k` the k most
    probable, most probable first (a model of a thousand classes otherwise writes them all).
    Each text is read on its own terms: with its pair, or alone where its pair is "" or None
    (transformers' tokenizer and pipeline read an empty pair as none), and the result has
    "text_pair" only where there is one. `progress` shows a bar over the inputs (so do tag, answer
    and choose). `stream=True` gives an iterator instead of a list: each result as soon as its
    window of inputs is done (base.streamed; so do the others); bad arguments still fail at the
    call."""
    check_texts(texts)
    check_count(batch_size)
    if top_k is not None:
        check_count(top_k, "top_k")
    if text_pairs is not None:  # None or "" in it: that text has no pair, as transformers' tokenizer reads ""
        given = isinstance(text_pairs, (list, tuple))
        check_texts([p if p is not None else "" for p in text_pairs] if given else text_pairs, "text_pairs")
    if text_pairs is not None and len(text_pairs) != len(texts):
        raise BertkitError(f"{len(texts)} texts but {len(text_pairs)} text pairs")
    model, name, job, settings, length = _prepared(model, None, tokenizer, {"max_length": max_length,
                                                                           "bf16": bool(bf16)})
    if name not in ("classification", "regression"):
        raise BertkitError(f"this is a model for {name}, not a text classifier")
    examples = [TextExample(t, (text_pairs[i] or None) if text_pairs else None) for i, t in enumerate(texts)]
    results = _predicted(job, model, examples, batch_size, length, settings.bf16, progress)
    if top_k is not None:
        results = ({**r, "scores": dict(sorted(r["scores"].items(), key=lambda kv: -kv[1])[:top_k])}
                   if "scores" in r else r for r in results)
    return _delivered(({"text": e.text, **({"text_pair": e.text_pair} if e.text_pair else {}), **r}
                       for e, r in zip(examples, results)), stream)


def _predicted(job, model, examples: list, batch_size: int, length: int, bf16: bool, progress: bool, **options):
    """job.predict's results over the examples, a window at a time (base.streamed), the inputs
    checked first."""
    job.check_inputs(model, examples, length)
    return streamed(model, examples, batch_size, bf16,
                    lambda part: job.predict(model, part, batch_size, length, bf16, **options), progress)


def _delivered(results, stream: bool):
    """The results as the caller asked: the iterator itself, or a list."""
    return results if stream else list(results)


def choose(model, texts: list[str], choices: list[list[str]], batch_size: int = 64, max_length: int | None = None,
           bf16: bool = False, tokenizer=None, progress: bool = False,
           stream: bool = False) -> list[dict] | Iterator[dict]:
    """{"text", "choices", "choice" (the index of the most probable), "answer" (its text),
    "score", "scores"} per context; each context has its own list of at least two choices."""
    check_texts(texts)
    check_count(batch_size)  # 0 ran silently: a batch is at least one context
    if len(texts) != len(choices):
        raise BertkitError(f"{len(texts)} contexts but {len(choices)} lists of choices")
    for n, options in enumerate(choices, 1):
        if isinstance(options, str) or len(options) < 2 or not all(isinstance(c, str) for c in options):
            raise BertkitError(f"context {n}: choices must be a list of at least two strings")
        blank = next((k for k, c in enumerate(options) if not c.strip()), None)
        if blank is not None:  # it would be scored as an answer, and perhaps chosen
            raise BertkitError(f"context {n}: choice {blank} is empty")
    overrides = {"max_length": max_length, "bf16": bool(bf16)}
    model, _, job, settings, length = _prepared(model, "multiple-choice", tokenizer, overrides)
    examples = [ChoiceExample(t, tuple(c)) for t, c in zip(texts, choices)]
    results = _predicted(job, model, examples, batch_size, length, settings.bf16, progress)
    return _delivered(({"text": e.text, "choices": list(e.choices), **r} for e, r in zip(examples, results)), stream)


def tag(model, inputs: list[str] | list[list[str]], batch_size: int = 64, max_length: int | None = None,
        bf16: bool = False, tokenizer=None, progress: bool = False,
        stream: bool = False) -> list[dict] | Iterator[dict]:
    """{"tokens", "tags", "scores"} per input: a list of words, or a text split into words and
    punctuation (then also "text", and "offsets": each word's [start, end) characters in it).
    With entity tags (BIO, IOBES, BILOU) also "entities": each entity's type, words [start, end),
    text, mean word score and, for a text, its characters (transformers' token-classification
    pipeline groups entities so with aggregation_strategy="first")."""
    if isinstance(inputs, str) or not isinstance(inputs, (list, tuple)):
        check_texts(inputs, "inputs")  # the error for a bare string
    for item in inputs:  # each a text or a list of words
        check_texts([item] if isinstance(item, str) else item, "inputs")
    check_count(batch_size)
    overrides = {"max_length": max_length, "bf16": bool(bf16)}
    model, _, job, settings, length = _prepared(model, "token-classification", tokenizer, overrides)
    sentences, spans = [], []
    for item in inputs:
        if isinstance(item, str):
            words, offsets = split_words(item)
            sentences.append(TaggedSentence(tuple(words)))
            spans.append(offsets)
        else:
            sentences.append(TaggedSentence(tuple(item)))
            spans.append(None)
    results = _predicted(job, model, sentences, batch_size, length, settings.bf16, progress)
    labels = model.config.labels
    entities = labels if is_bio(labels) else None  # (the scheme read once, not per input)
    return _delivered((_tagged(item, r, s, entities) for item, r, s in zip(inputs, results, spans)), stream)


def _tagged(item, result: dict, offsets, labels: tuple[str, ...] | None) -> dict:
    """tag()'s record of one input: a text's own characters and, given entity `labels`, the entities."""
    record = {**({"text": item} if offsets is not None else {}), **result}
    if offsets is not None:
        record["offsets"] = [list(o) for o in offsets]
    if labels is not None:
        record["entities"] = [_entity(result, offsets, item, kind, start, end)
                              for kind, start, end in entity_spans(result["tags"], labels)]
    return record


def _entity(result: dict, offsets, item, kind: str, start: int, end: int) -> dict:
    """One entity of a tag() result: words [start, end), their text (the characters they span in
    a text; the words joined by spaces in a list), the mean of their scores."""
    scores = [p for p in result["scores"][start:end] if p is not None]
    entity = {"entity": kind, "words": [start, end], "score": sum(scores) / max(len(scores), 1)}
    if offsets is None:
        return {**entity, "text": " ".join(result["tokens"][start:end])}
    first, last = offsets[start][0], offsets[end - 1][1]
    return {**entity, "text": item[first:last], "start": first, "end": last}


def answer(model, questions: list[str], contexts: list[str], top_k: int = 1, null_answers: bool | None = None,
           batch_size: int = 64, max_length: int | None = None, bf16: bool = False, tokenizer=None,
           progress: bool = False, max_answer_length: int | None = None, doc_stride: int | None = None,
           max_query_length: int | None = None, stream: bool = False) -> list[dict] | Iterator[dict]:
    """{"question", "answer", "start", "end" (characters of the context, None for no answer),
    "score"} per question; top_k > 1 adds "alternatives". `score` is the answer's probability
    among the n-best candidate spans (softmax of start + end logits, as transformers' run_qa
    post-processing gives it; its pipeline multiplies a start and an end probability instead).
    Empty answers are allowed when the model was fine-tuned with unanswerable questions, or with
    null_answers=True. The window and span settings default to those it was fine-tuned with
    (else run_qa's: answers of at most 30 tokens, a stride of 128, questions of 64)."""
    check_texts(questions, "questions")
    check_texts(contexts, "contexts")
    check_count(top_k, "top_k")  # 0 silently gave one answer
    check_count(batch_size)
    if len(questions) != len(contexts):
        raise BertkitError(f"{len(questions)} questions but {len(contexts)} contexts")
    for name, texts in (("question", questions), ("context", contexts)):
        empty = next((n for n, t in enumerate(texts, 1) if not t.strip()), None)
        if empty is not None:  # an empty question would still get a confident span
            raise BertkitError(f"{name} {empty} is empty")
    overrides = {"max_length": max_length, "null_answers": null_answers, "bf16": bool(bf16),
                 "max_answer_length": max_answer_length, "doc_stride": doc_stride, "max_query_length": max_query_length}
    model, _, job, settings, length = _prepared(model, "qa", tokenizer, overrides)
    examples = [QAExample(str(i), q, c) for i, (q, c) in enumerate(zip(questions, contexts))]
    results = _predicted(job, model, examples, batch_size, length, settings.bf16, progress, top_k=top_k)
    return _delivered(({"question": q, **{k: v for k, v in r.items() if k != "id"}}
                       for q, r in zip(questions, results)), stream)
