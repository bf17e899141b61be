"""`bertkit pretrain`: a job description in, a trained run directory out.

    job = PretrainJob(model="mini-bert", objective="mlm", corpus="imdb", train={"time_budget": 600})
    out = pretrain(job)     # OUT/{config.json, model.safetensors, tokenizer files, metrics.json,
                            #      metrics.jsonl, loss_curve.png, checkpoints/}

It wires the pieces together and nothing else: a tokenizer (given, the teacher's, or trained on
the corpus and cached), the data pipeline (data/), the objective and its models (objectives/),
held-out batches from a split the model never trains on, and the training loop (train/), or the
pure-NumPy trainer with `backend="numpy"`.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import time
import warnings
import dataclasses
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterator

from .data import check_vocab_fits
from .data.corpora import Corpus
from .errors import BertkitError, first_line, outside_stacklevel
from .files import RESULT_FILES, checkpoint_folders, launch_rank, no_config, output_dir, run_lock, staging_dir, writing
from .options import seconds, spelled, typed
from .schedules import check_seed

BACKENDS = ("torch", "numpy")
PRECISIONS = ("auto", "fp32", "bf16")
# config.family -> the tokenizer recipe of its release (data/trainers.py FAMILY_KIND)
TOKENIZER_FAMILY = {"deberta-v2": "deberta-v3"}
TOKENIZER_RECIPE = 2  # bump when the way a run trains its tokenizer changes: cached ones rebuild
# (2: vocabularies capped at the size asked, ALBERT's own special tokens and normalizer)
JOB_FILE = "job.json"  # the run's settings, at the root of OUT: what --resume continues with
# job.json's "format": bump when a resumed run would build its examples, held-out batches or schedule
# otherwise than the version that started it (1: the first recorded; runs before it lack the field)
JOB_FORMAT = 1
# What a resumed run may change: where and how fast it runs, how long it goes on, what it keeps.
# Anything else (data, batch, model, optimizer, seed) would make it another run than the one saved.
RESUMABLE = ("device", "precision")  # (job.json holds neither `out` nor `resume`)
PLACES = ("corpus", "eval_corpus", "tokenizer", "teacher")  # settings that may name a local file or folder
RESUMABLE_TRAIN = ("steps", "time_budget", "progress", "save_every", "keep", "eval_every", "compile",
                   "activation_checkpointing", "skip_nonfinite", "bf16")


@dataclass(frozen=True)
class PretrainJob:
    model: str = "mini-bert"            # a preset (`bertkit models`)
    objective: str = "mlm"              # mlm, mlm+nsp, mlm+sop, rtd, distill
    corpus: str = "imdb"                # built-in name, file or folder, or a Hugging Face data set
    field: str = "text"                 # the text field of JSONL/CSV/hub corpora
    eval_corpus: str | None = None      # held-out text; None: the corpus's dev split
    out: str | None = None              # None: runs/<model>-<objective>
    tokenizer: str | None = None        # None: the teacher's (distill), else trained on the corpus
    teacher: str | None = None          # distill: checkpoint directory, hub id or preset
    teacher_layers: tuple[int, ...] | None = None  # distill: teacher blocks the student starts from
    backend: str = "torch"
    device: str = "auto"                # auto: cuda when available
    precision: str = "auto"             # auto: bf16 autocast where the hardware has bf16 matmuls
    max_length: int | None = None       # None: min(128, the model's maximum)
    batch_size: int = 64                # sequences per micro-batch (over all processes)
    mask_rate: float = 0.15
    whole_word: bool = False
    static_masks: int | None = None     # K fixed masks per example (original BERT); None: dynamic
    eval_batches: int = 16
    resume: bool = False
    train: dict[str, Any] = dataclasses.field(default_factory=dict)         # TrainSettings fields
    architecture: dict[str, Any] = dataclasses.field(default_factory=dict)  # model config overrides
    loss: dict[str, Any] = dataclasses.field(default_factory=dict)          # objectives.LossSettings fields
    # Not a setting: the content of the text the run read ({"corpus": ..., "eval_corpus": ...}, by
    # Corpus.fingerprint), set by the run and recorded in job.json, so --resume refuses a changed corpus
    fingerprints: dict[str, str] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        from .objectives.registry import NAMES, check_loss

        if self.objective not in NAMES:
            raise BertkitError(f"unknown objective {self.objective!r}; choose one of {', '.join(NAMES)}")
        check_loss(self.objective, self.loss)
        for name, value, choices in (("backend", self.backend, BACKENDS), ("precision", self.precision, PRECISIONS)):
            if value not in choices:
                raise BertkitError(f"unknown {name} {value!r}; choose one of {', '.join(choices)}{fp16_hint(value)}")
        check_seed(self.train.get("seed", 0))  # (the data pipeline draws with it before the trainer checks)
        for name in ("batch_size", "eval_batches"):
            if getattr(self, name) < 1:
                raise BertkitError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.max_length is not None and self.max_length < 8:
            raise BertkitError(f"max_length must be at least 8, got {self.max_length}")
        if self.objective == "distill" and not self.teacher:
            raise BertkitError("distill needs a teacher (--teacher: a pre-trained checkpoint directory or hub id; a "
                               "preset name such as bert-base gives an untrained one, for trying the plumbing)")
        if self.objective != "distill" and (self.teacher or self.teacher_layers is not None):
            raise BertkitError(f"--teacher and --teacher-layers are for --objective distill, not {self.objective}")
        if "family" in self.architecture:  # the weights' names, the tokenizer and the file format follow it
            raise BertkitError("the family cannot be overridden; choose a preset of that family (bertkit models)")
        if self.backend == "numpy":
            if self.objective != "mlm":
                raise BertkitError(f"the NumPy backend trains masked-LM only, not {self.objective}")
            if self.resume:
                raise BertkitError("the NumPy backend writes no resumable checkpoints; --resume needs --backend torch")
            if self.precision == "bf16":
                raise BertkitError("the NumPy backend computes in float32; bf16 needs --backend torch")

    def record(self) -> dict:
        """The job as JSON values, as written to OUT/job.json. A local file or folder is recorded
        by its absolute path: the same corpus named from another folder is the same corpus."""
        values = {k: located(v) if k in PLACES else v for k, v in asdict(self).items() if k not in ("resume", "out")}
        return json.loads(json.dumps(values))

    @property
    def out_dir(self) -> Path:
        # "~" expanded here, once: a literal --out=~/x (no shell expansion) split the run over two folders
        return Path(self.out).expanduser() if self.out else Path("runs") / f"{self.model}-{self.objective.replace('+', '-')}"

    def settings(self):
        """The TrainSettings for this job: the given fields, and a 10-minute budget when neither a
        step count nor a budget was given (`bertkit pretrain` with no arguments)."""
        values = dict(self.train)
        if values.get("time_budget") is not None:
            values["time_budget"] = seconds(values["time_budget"])
        values.setdefault("time_budget", None)
        if values["time_budget"] is None and values.get("steps") is None:
            values["time_budget"] = 600.0
        values.setdefault("steps", None)
        if self.backend == "numpy":
            from .numpy_ref.train import TrainSettings as NumpySettings
            from .train import TrainSettings

            if "activation_checkpointing" in values:  # the NumPy trainer's name for it
                values["recompute"] = values.pop("activation_checkpointing")
            fields = {f.name for f in dataclasses.fields(NumpySettings)}
            known = {k: v for k, v in values.items() if k in fields}
            ignored = sorted(set(values) - set(known) - {"progress", "bf16"})
            if ignored:  # the settings it takes, by the names flags, --set and config files give them
                takes = {"activation_checkpointing" if f == "recompute" else f for f in fields} | {"progress"}
                takes &= {f.name for f in dataclasses.fields(TrainSettings)}
                raise BertkitError(f"the NumPy backend has no {', '.join(ignored)} setting; "
                                   f"it takes {', '.join(sorted(takes))}")
            return NumpySettings(**typed(NumpySettings, known, "train settings"))
        from .train import TrainSettings

        return TrainSettings(**typed(TrainSettings, values, "train settings"))


# ---- pieces ---------------------------------------------------------------------------------
def located(value: str | None) -> str | None:
    """The absolute path of `value` if it names an existing local file or folder; else `value`
    (a built-in corpus, a preset, a hub id)."""
    if value is None:
        return None
    path = Path(value).expanduser()
    return str(path.resolve()) if path.exists() else value


def say(*parts) -> None:
    """Progress lines for people, on stderr (stdout stays for results), from one process only."""
    if launch_rank() == 0:
        print(*parts, file=sys.stderr, flush=True)


def pick_device(name: str):
    """The device `name` names (auto: cuda when available, else cpu), checked. Under torchrun, a
    cuda without an index is this process's own GPU, cuda:LOCAL_RANK, as torchrun means it: every
    process on GPU 0 could not start NCCL."""
    import os

    import torch

    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(name)
    except RuntimeError:
        raise BertkitError(f"unknown device {name!r} (use auto, cpu, cuda, cuda:1, ...)") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise BertkitError(f"device {name} asked for, but torch sees no CUDA device")
    if device.type == "cuda" and device.index is None and os.environ.get("LOCAL_RANK") is not None:
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise BertkitError(f"device {device} asked for, but torch sees {torch.cuda.device_count()} CUDA device(s)")
    return device


def native_bf16(device) -> bool:
    """Whether bf16 matmuls run in hardware here (then autocast is a large speed-up, not a slow
    emulation): CUDA with bf16 support, or a CPU with AVX512-BF16 or AMX."""
    import torch

    if device.type == "cuda":  # compute capability 8 (Ampere) on; is_bf16_supported() counts emulation too
        return torch.cuda.get_device_capability(device)[0] >= 8
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return any(flag in flags.split() for flag in ("avx512_bf16", "amx_bf16"))


def fp16_hint(precision: str) -> str:
    """Why a precision of float16 is refused, for the error that refuses it."""
    return ("" if str(precision).lower() not in ("fp16", "float16", "half") else
            " (float16 is not offered: training in it needs loss scaling, where bf16 keeps float32's range; "
            "model.half() runs float16 inference in Python)")


def bf16_for(precision: str, device) -> bool:
    """Whether a precision setting (auto, fp32, bf16) runs bf16 autocast on `device`: `auto` where
    the hardware multiplies bf16 natively. An explicit bf16 where it is only emulated warns once (a
    fine-tune on an AVX2-only CPU ran 12x slower than in fp32, without a word)."""
    if precision != "bf16":
        return precision == "auto" and native_bf16(device)
    warn_if_emulated_bf16(device)
    return True


EMULATION_TOLD: set[str] = set()  # the device types told that their bf16 is emulated


def warn_if_emulated_bf16(device) -> None:
    """Say that bf16 asked for on `device` is only emulated there, several times slower than fp32:
    the command line's --precision bf16 and Python's bf16=True (the Trainer, finetune, the task
    helpers) alike, once per process and kind of device, however many of them a job passes
    through (a command's --precision, then its Trainer; Python's own once-only filter forgets
    whenever any filter changes, as loading a checkpoint's quiet parts does)."""
    if device.type not in EMULATION_TOLD and not native_bf16(device):
        EMULATION_TOLD.add(device.type)
        where = "CPU (no AVX512-BF16 or AMX)" if device.type == "cpu" else f"{device.type} device (no bf16 hardware)"
        warnings.warn(f"bf16 on this {where} is emulated: several times slower than fp32 here; --precision auto "
                      "(bf16=False in Python) picks fp32 on such hardware", stacklevel=outside_stacklevel())


def tokenizer_family(family: str) -> str:
    return TOKENIZER_FAMILY.get(family, family)


def trained_tokenizer(corpus, family: str, vocab_size: int, cache_dir: Path | None = None):
    """A tokenizer of the family's kind trained on `corpus`, cached by the corpus content and
    the settings (training one on IMDB takes ~7 s on 2 cores; a resumed or repeated run reuses it)."""
    from .data import TokenizerSettings, load_tokenizer, train_tokenizer
    from .data.cache import cache_root
    from .data.corpora import DataWarning, ReadStats

    settings = TokenizerSettings.for_family(tokenizer_family(family), vocab_size=vocab_size)
    key = hashlib.sha256(json.dumps([corpus.fingerprint(), asdict(settings), TOKENIZER_RECIPE]).encode()).hexdigest()
    folder = cache_root(cache_dir) / "tokenizers" / key[:32]
    if folder.exists():
        try:
            return load_tokenizer(folder / "tokenizer.json")
        except Exception as e:  # deleted or cut short: removed and retrained, or it fails every run
            why = first_line(e).replace(f"{folder}{os.sep}", "")  # (the error names the file in the folder)
            say(f"warning: the cached tokenizer at {folder} is damaged ({why}); training it again")
            shutil.rmtree(folder, ignore_errors=True)
    say(f"training a {settings.kind} tokenizer ({vocab_size:,} tokens) on {corpus.name} ...")
    with warnings.catch_warnings():  # what reading skipped or repaired: the data pipeline reads it again and says it
        warnings.simplefilter("ignore", DataWarning)
        tokenizer = train_tokenizer(corpus.documents(ReadStats()), settings)
    _save_atomically(tokenizer, folder, cache_dir)
    tokenizer = load_tokenizer(folder)
    if len(tokenizer) < vocab_size:  # the model's vocabulary follows it, unless overridden
        say(f"the tokenizer has {len(tokenizer):,} of the {vocab_size:,} tokens asked for (a small corpus, or "
            "a WordPiece alphabet kept to a quarter of the size)")
    return tokenizer


def _save_atomically(tokenizer, folder: Path, cache_dir: Path | None = None) -> None:
    """Write into a temporary folder, then rename it to `folder` (a folder already there is another
    process's, which finished first: it is kept)."""
    from .data.cache import cache_writes, remove_stale

    with cache_writes(cache_dir):
        folder.parent.mkdir(parents=True, exist_ok=True)
        remove_stale(folder.parent, ".writing-*")
        tmp = staging_dir(folder.parent, ".writing-")
    try:
        tokenizer.save(tmp, "PreTrainedTokenizerFast", 512)
        try:
            os.replace(tmp, folder)
        except OSError:  # another process finished the same tokenizer first: keep theirs
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


class HeldOut(Corpus):
    """A corpus without a split of its own (files, folders) cut by document hash, with the rule
    the built-in sets use (data.split_of): the dev documents are held out for evaluation, the rest
    is trained on."""

    def __init__(self, base, part: str):
        self.base, self.part = base, part
        self.name = f"{base.name} ({part})"

    def documents(self, stats) -> Iterator[str]:
        from .data.corpora import split_of

        seen = kept = 0
        for doc in self.base.documents(stats):
            seen += 1
            if (split_of(doc) == "dev") == (self.part == "dev"):
                kept += 1
                yield doc
        if seen and not kept:  # "the corpus is empty" would follow, of a corpus that has text
            share = ("none of its" if self.part == "dev" else "all") + f" {seen:,} document(s)"
            raise BertkitError(f"{self.base.name}: {share} fell in the held-out share (documents are split by a hash "
                               "of their text, about 1 in 10 held out; in a text file, blank lines separate "
                               "documents): give the held-out text with --eval-corpus, or more documents")

    def fingerprint(self) -> str:
        return f"{self.base.fingerprint()}:held-out-by-hash:{self.part}"


def corpora(job: PretrainJob):
    """(training corpus, held-out corpus) for the job."""
    from .data import open_corpus
    from .data.corpora import BUILTIN, DataWarning, HubDataset

    train = open_corpus(job.corpus, field=job.field)
    if job.eval_corpus is not None:
        given, trained = (Path(str(p)).expanduser().resolve() for p in (job.eval_corpus, job.corpus))
        files = given.exists() and trained.exists() and not {str(job.eval_corpus), str(job.corpus)} & set(BUILTIN)
        if files and (given.is_relative_to(trained) or trained.is_relative_to(given)):
            where = ("is the training corpus" if given == trained else f"is inside the training folder {job.corpus}"
                     if given.is_relative_to(trained) else f"holds the training corpus {job.corpus}")
            said = f"--eval-corpus {job.eval_corpus} {where}: held-out scores would be on trained text"
            if job.resume:  # a run started so before this check: it goes on as it began, said
                warnings.warn(f"{said} (this run was started so)", DataWarning, stacklevel=2)
            else:
                raise BertkitError(f"{said}; leave it out to hold out 1 document in 10 by a hash of its text, or give "
                                   "other text")
        # a named data set (built in, or on the hub) is held out by its dev / validation split
        return train, open_corpus(job.eval_corpus, field=job.field, split="dev")
    if job.corpus in BUILTIN or isinstance(train, HubDataset):
        return train, open_corpus(job.corpus, field=job.field, split="dev")
    return HeldOut(train, "train"), HeldOut(train, "dev")


# ---- the job --------------------------------------------------------------------------------
def pretrain(job: PretrainJob) -> Path:
    """Run the job; returns the output directory (final model at its root). Another run writing
    the same folder meanwhile is refused (files.run_lock)."""
    started = time.time()
    with run_lock(job.out_dir):
        try:
            return _pretrain(job)
        except KeyboardInterrupt as e:
            if str(e):  # (the NumPy backend's says what it keeps)
                raise
            raise KeyboardInterrupt(_what_was_kept(job.out_dir, started)) from None


def _what_was_kept(out: Path, started: float) -> str:
    """What an interrupted run leaves to continue from, for the 'interrupted' line; a run whose
    metrics.json was written since it `started` had finished (--resume would call it so)."""
    summary = out / "metrics.json"
    if summary.exists() and summary.stat().st_mtime >= started:
        curve = "" if (out / "loss_curve.png").exists() else (
            f"; loss_curve.png was not drawn: bertkit visualize curves {out} --out {out} draws the run's curves "
            "(curves.png)")
        return f"after the run finished: its final model and metrics.json are saved in {out}{curve}"
    kept = checkpoint_folders(out)
    if not kept:
        return f"before the first checkpoint; nothing in {out} to resume from: start the run again"
    step = int(kept[-1].name.removeprefix("step-"))
    return (f"at or after step {step:,}: {kept[-1]} is intact; continue with bertkit pretrain --out {out} "
            "--resume")


def _pretrain(job: PretrainJob) -> Path:
    from .model import get_preset  # through model.py, which registers every family's presets

    preset = get_preset(job.model)  # unknown preset: the error lists the known ones
    if job.backend == "numpy":  # before minutes of tokenizer training: BERT, post-LN, the exact GELU
        from .numpy_ref.hf_io import check_savable
        from .numpy_ref.model import check_supported

        if preset.config.family != "bert":
            raise BertkitError(f"the NumPy backend implements BERT only, not {preset.config.family} ({job.model})")
        check_supported(preset.config.replace(**job.architecture))
        check_savable(preset.config.replace(**job.architecture))  # the run ends by saving the model
    from .data.corpora import reads_into

    out = job.out_dir
    for flag, corpus in (("--corpus", job.corpus), ("--eval-corpus", job.eval_corpus)):
        folder = Path(corpus).expanduser() if corpus else None
        if folder is not None and folder.is_dir() and reads_into(folder, out):
            raise BertkitError(f"--out {out} is inside the {flag} folder {corpus}: the run's own files would be read "
                               "as text (and, changing the corpus, stop --resume); choose an --out outside it")
    settings = job.settings()
    checkpoints = checkpoint_folders(out)
    if job.resume and not checkpoints:
        raise BertkitError(f"--resume: no checkpoint in {out / 'checkpoints'} to continue from")
    if not job.resume and checkpoints:
        raise BertkitError(f"{out} already holds a run; pass --resume to continue it, or choose another --out")
    output_dir(out, keep=() if job.resume else RESULT_FILES, run_logs=not job.resume)  # (an unfinished run's kept)
    if job.resume:
        steps_before = _check_unchanged(job, out, settings)

    if job.backend == "torch" and not (job.objective == "distill" and _teacher_is_checkpoint(job)):
        _check_fits(job)  # before minutes of tokenizer training and tokenizing
    train_corpus, eval_corpus = corpora(job)
    train_corpus.check()  # a hub set that cannot be read: said before a tokenizer is trained on it
    fingerprints = {"corpus": train_corpus.fingerprint(), "eval_corpus": eval_corpus.fingerprint()}
    if job.objective == "distill" and _teacher_is_checkpoint(job):
        fingerprints["teacher"] = _teacher_fingerprint(job.teacher)
    if job.resume:
        _check_same_text(job, out, fingerprints)
        if settings.steps is not None and settings.steps != steps_before:  # (said once the run is known to go on)
            say(f"steps {steps_before} -> {settings.steps}: the learning-rate schedule stretches to the new length")
    job = dataclasses.replace(job, fingerprints=fingerprints)  # what job.json records
    tokenizer = _tokenizer(job, preset, train_corpus, checkpoints)
    architecture = dict(job.architecture)
    if job.objective == "distill" and _teacher_is_checkpoint(job):
        from .model import STUDENT_SETTINGS

        shape = [k for k in architecture if k not in STUDENT_SETTINGS]  # dropout is the student's own
        if shape:
            raise BertkitError("distilling from a checkpoint: the student's shape comes from the teacher, "
                               f"so model overrides ({', '.join(shape)}) cannot apply; "
                               f"{' and '.join(STUDENT_SETTINGS)} can")
    else:
        architecture.setdefault("vocab_size", len(tokenizer))  # a model trained from scratch
        architecture.setdefault("pad_token_id", tokenizer.pad_token_id)  # the embeddings' padding row
    if job.objective == "mlm" and preset.config.family in ("deberta", "deberta-v2"):
        # DeBERTa pre-trains its MLM through the enhanced mask decoder (He et al., 2021, sec. 3.2)
        architecture.setdefault("enhanced_mask_decoder", True)
        if architecture["enhanced_mask_decoder"]:
            say("the MLM head decodes through DeBERTa's enhanced mask decoder, which transformers lacks: there the "
                "encoder matches but MLM logits differ (--override enhanced_mask_decoder=false for the plain head)")
    config = preset.config.replace(**architecture)
    if job.backend == "numpy":
        return _pretrain_numpy(job, config, tokenizer, train_corpus, eval_corpus, settings)

    import torch

    from .objectives import build_objective
    from .train import Trainer

    device = pick_device(job.device)
    if bf16_for(job.precision, device):
        settings = dataclasses.replace(settings, bf16=True)
    torch.manual_seed(settings.seed)  # the initial weights
    objective = build_objective(job.objective, job.model, teacher=job.teacher, teacher_layers=job.teacher_layers,
                                loss=job.loss, **architecture)
    models = objective.models()
    _check_savable(models)
    max_length = _max_length(job, models)
    teacher = getattr(objective, "teacher", None)
    if job.tokenizer is not None and getattr(teacher, "tokenizer", None) is not None and \
            tokenizer.backend.get_vocab() != teacher.tokenizer.backend.get_vocab():
        raise BertkitError(f"--tokenizer {job.tokenizer}: its vocabulary is not the teacher's ({job.teacher}), "
                           "whose soft targets are for the ids its own tokenizer gives; leave --tokenizer out to "
                           "use the teacher's")
    for model in models.values():  # a distilled student has its teacher's vocabulary, whatever --tokenizer gives
        check_vocab_fits(tokenizer, model.config.vocab_size, model.config.type_vocab_size)
        model.tokenizer = tokenizer
    data, held_out = _data(job, config.family, tokenizer, train_corpus, eval_corpus, max_length)
    trainer = Trainer(objective, data.batch_at, settings, out, held_out, device)
    if job.resume:
        trainer.resume()
        _check_left_to_train(trainer, out)
        say(f"resuming {out} at step {trainer.step} ({trainer.elapsed:.0f} s trained)")
    _write_job(job, out)
    unique = {id(p): p.numel() for m in models.values() for p in m.parameters()}  # shared tables once
    what = job.model
    if job.objective == "distill":  # the preset names the family only; the shape is the teacher's
        student = models[""].config
        layers = f"{student.num_layers} layer{'s' * (student.num_layers != 1)}"
        what = (f"a {student.family} student of {layers} x {student.hidden_size}, its shape "
                f"from the teacher {job.teacher}")
    say(f"{job.objective} on {what} ({sum(unique.values()):,} parameters), "
        f"{device}, {'bf16 autocast' if settings.bf16 else 'fp32'}, "
        + (f"budget {settings.time_budget:.0f} s" if settings.time_budget
           else f"{settings.steps} step{'s' * (settings.steps != 1)}"))
    with warnings.catch_warnings():
        from .models.deberta import DebertaConfig

        if any(isinstance(m.config, DebertaConfig) and m.config.enhanced_mask_decoder for m in models.values()):
            from .interop.hf import EnhancedMaskDecoderWarning

            warnings.simplefilter("ignore", EnhancedMaskDecoderWarning)  # said when the run started
        trainer.fit()
    return out


def saved_job(out: Path) -> dict | None:
    """OUT/job.json, the settings a run was started with (None for runs from before it was written),
    without its format number (`saved_format`)."""
    from .files import read_json

    path = out / JOB_FILE
    return {k: v for k, v in read_json(path).items() if k != "format"} if path.exists() else None


def saved_format(out: Path) -> int:
    """The JOB_FORMAT of the bertkit that wrote OUT/job.json last (0: one from before the field)."""
    from .files import read_json

    value = read_json(out / JOB_FILE).get("format", 0)
    return value if isinstance(value, int) else 0


def _write_job(job: PretrainJob, out: Path) -> None:
    """OUT/job.json: at the start, and again at each resume (the steps asked last, the corpus'
    fingerprints, this version's format)."""
    if launch_rank() == 0:
        with writing("the run's settings (job.json)", out):
            out.mkdir(parents=True, exist_ok=True)
            (out / JOB_FILE).write_text(json.dumps({**job.record(), "format": JOB_FORMAT}, indent=2) + "\n")


def _check_unchanged(job: PretrainJob, out: Path, settings) -> int | None:
    """A resumed run continues the saved one only if it reads the same data in the same batches
    into the same model with the same optimizer: any other setting that differs from OUT/job.json
    is named and refused (the batches would silently differ from an uninterrupted run's, or the
    checkpoint would not fit the model). Returns the steps job.json asked for."""
    saved = saved_job(out)
    if saved is None:  # the defaults would build another model and read other data, and fail much later
        raise BertkitError(f"{out / JOB_FILE}: missing, so --resume does not know the run's settings (every run "
                           f"writes it when it starts): put it back; a run of a bertkit from before job.json can "
                           f"take the one a new run of the same command writes (--out elsewhere, then copy it here)")
    try:
        before = PretrainJob(**typed(PretrainJob, saved, str(out / JOB_FILE)))
        before_settings = before.settings()
    except (BertkitError, TypeError) as e:
        raise BertkitError(f"{out / JOB_FILE}: not a job this bertkit reads ({e})") from None
    now, then = job.record(), before.record()  # (an older job.json's relative paths: from here)
    changed = [f"{k} {spelled(then.get(k))} -> {spelled(now.get(k))}" for k in now
               if k not in ("train", "fingerprints", *RESUMABLE) and now.get(k) != then.get(k)
               and not (k == "loss" and _loss_values(now[k]) == _loss_values(then.get(k)))]
    changed += [f"{f.name} {spelled(getattr(before_settings, f.name))} -> {spelled(getattr(settings, f.name))}"
                for f in dataclasses.fields(settings)
                if f.name not in RESUMABLE_TRAIN and getattr(settings, f.name) != getattr(before_settings, f.name)]
    if changed:
        raise BertkitError(f"--resume: this run was started with other settings ({'; '.join(changed)}); "
                           f"a resumed run keeps them (see {out / JOB_FILE}), or start a new run in another --out")
    if saved_format(out) < JOB_FORMAT:
        say(f"bertkit: warning: {out} was started by an older bertkit: resumed, it goes on with this version's "
            "training examples, warm-up and held-out batches, which may differ from its first part's")
    return before_settings.steps


def _loss_values(loss: dict | None) -> dict:
    """The loss settings in effect: a default given by name (--set rtd_weight=50) is no change."""
    from .objectives.registry import LossSettings

    return dataclasses.asdict(LossSettings(**(loss or {})))


def _check_same_text(job: PretrainJob, out: Path, fingerprints: dict[str, str]) -> None:
    """The same settings read other batches from a corpus whose content changed since the run
    started (another epoch order, other examples): refused by the fingerprints job.json holds. A
    job.json from before they were recorded is taken on trust."""
    then = (saved_job(out) or {}).get("fingerprints")
    if not isinstance(then, dict):
        say(f"bertkit: warning: {out / JOB_FILE} holds no fingerprint of the corpus (an older bertkit's): the "
            "corpus is taken as the one the run started on, and is fingerprinted from now on")
        return
    for key, what, name in (("corpus", "corpus", job.corpus), ("eval_corpus", "held-out corpus", job.eval_corpus)):
        if key in then and then[key] != fingerprints[key]:
            effect = "train on other batches" if key == "corpus" else "score other held-out batches"
            raise BertkitError(f"--resume: the {what} {name or job.corpus} changed since the run started (its "
                               f"fingerprint differs); resuming would {effect}: start a new run, or restore the {what}")
    if "teacher" in then and then["teacher"] != fingerprints.get("teacher"):
        raise BertkitError(f"--resume: the teacher {job.teacher} changed since the run started (its weights' "
                           "fingerprint differs); resuming would distill another model: start a new run, or restore "
                           "the teacher")


def _teacher_fingerprint(teacher: str) -> str:
    """A digest of a teacher checkpoint's config and weight files (its tokenizer is the run's own)."""
    from .data.corpora import file_digest
    from .hub import resolve

    folder = resolve(teacher)
    files = sorted(p for p in folder.iterdir() if p.name == "config.json" or p.suffix in (".safetensors", ".bin"))
    return file_digest(files)


def _check_left_to_train(trainer, out: Path) -> None:
    """Resuming a finished run, or asking for fewer steps than the checkpoint has, would train
    nothing and rewrite the run's final model; an interrupted run whose training was done (cut off
    while saving) is still finished off."""
    s = trainer.settings
    if s.steps is not None and trainer.step > s.steps:
        raise BertkitError(f"--resume: the run is at step {trainer.step}, past the {s.steps} steps asked for; "
                           "give more --steps")
    if trainer.done() and (out / "metrics.json").exists():
        if s.steps is not None and trainer.step >= s.steps:
            raise BertkitError(f"--resume: the run has finished its {s.steps} steps; give more --steps to train on"
                               + (" (a time budget does not lift them)" if s.time_budget is not None else ""))
        raise BertkitError(f"--resume: the run has used its time budget of {s.time_budget:.0f} s; give a longer "
                           "--time-budget to train on (more --steps alone do not lift it)")


def _check_fits(job: PretrainJob) -> None:
    """Build the objective's models without memory (meta device): an objective that does not fit
    the model, a bad override or a too-long max_length fails here, at once."""
    import torch

    from .objectives import build_objective

    # The padding id comes from the tokenizer, trained later: any id in the vocabulary will do
    # here (a preset's own, e.g. ModernBERT's 50283, may lie beyond an overridden vocab_size).
    architecture = {"pad_token_id": 0, **job.architecture}
    with torch.device("meta"):
        models = build_objective(job.objective, job.model, teacher=job.teacher,
                                 teacher_layers=job.teacher_layers, **architecture).models()
    _check_savable(models)
    _max_length(job, models)


def _check_savable(models: dict) -> None:
    """The run saves its models in Hugging Face format: one transformers cannot hold (a distilled
    student of a teacher whose layer_norm_eps DistilBERT fixes otherwise) is refused before training."""
    from .interop.hf import config_to_hf

    for model in models.values():
        config_to_hf(model.config, model.head_kind)


def _max_length(job: PretrainJob, models: dict) -> int:
    """The example length: the job's, or 128 capped by what every model's positions allow."""
    limit = min(m.backbone.embeddings.max_length for m in models.values())
    if job.max_length is not None and job.max_length > limit:
        raise BertkitError(f"max_length {job.max_length} is longer than {job.model} can take ({limit} tokens)")
    return job.max_length or min(128, limit)


def _teacher_is_checkpoint(job: PretrainJob) -> bool:
    from .config import PRESETS

    return job.teacher is not None and (Path(job.teacher).is_dir() or job.teacher not in PRESETS)


def _tokenizer(job: PretrainJob, preset, train_corpus, checkpoints: list[Path]):
    from .data import load_tokenizer

    if checkpoints and job.resume:  # the run's own tokenizer, whatever trained it
        return load_tokenizer(checkpoints[-1])
    if job.tokenizer is not None:
        return load_tokenizer(job.tokenizer)
    if job.objective == "distill" and _teacher_is_checkpoint(job):
        from .data.tokenizer import TOKENIZER_FILES
        from .hub import resolve
        from .interop.hf import transformer_folder

        folder = resolve(job.teacher)
        if not (folder / transformer_folder(folder) / "config.json").is_file():  # before blaming its tokenizer
            raise no_config(folder / transformer_folder(folder))
        if not any((folder / name).exists() for name in TOKENIZER_FILES):
            raise BertkitError(f"{job.teacher}: the teacher has no tokenizer files; pass --tokenizer")
        return load_tokenizer(folder)
    vocab = job.architecture.get("vocab_size", preset.config.vocab_size)
    return trained_tokenizer(train_corpus, preset.config.family, vocab)


HELD_OUT_SEED = 1  # the held-out batches' rows and masks, whatever --seed draws the training side with


def _data(job: PretrainJob, family: str, tokenizer, train_corpus, eval_corpus, max_length: int):
    """The training pipeline and a fixed list of held-out batches (their masks are fixed too,
    so every evaluation scores the same predictions, and runs of other seeds score the same
    text with the same masks: their losses compare)."""
    from .data import PipelineSettings, default_masking, pretraining_data

    base = default_masking(job.objective)  # ALBERT's n-grams are of whole words: --whole-word adds, never removes
    masking = dataclasses.replace(base, rate=job.mask_rate, whole_word=job.whole_word or base.whole_word)
    seed = job.train.get("seed", 0)
    settings = PipelineSettings(objective=job.objective, family=family, max_length=max_length,
                                batch_size=job.batch_size, seed=seed, masking=masking,
                                static_masks=job.static_masks)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        data = pretraining_data(train_corpus, tokenizer, settings)
    for w in caught:  # what reading repaired (undecodable bytes); the summary below has the rest
        if str(w.message) != data.summary():
            say(f"bertkit: warning: {w.message}")  # (the CLI's own warnings read so)
    say(f"training data: {data.summary()}")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the training side already reported what was repaired
            held = pretraining_data(eval_corpus, tokenizer, dataclasses.replace(settings, seed=HELD_OUT_SEED))
    except BertkitError as e:
        say(f"no held-out evaluation: {e}")
        return data, []
    # eval_batches of the optimizer step's size (batch_size x accumulation), run in micro-batches:
    # the same held-out text whichever way a step is split (the rows' order does not depend on it)
    micro = job.eval_batches * job.train.get("accumulation", 1)
    batches = [held.batch_at(i) for i in range(min(micro, len(held)))]
    say(f"held-out data: {eval_corpus.name}, {len(batches)} batch{'es' * (len(batches) != 1)} of {job.batch_size} "
        f"({sum(len(b['input_ids']) for b in batches):,} sequences)")
    return data, batches


def _pretrain_numpy(job, config, tokenizer, train_corpus, eval_corpus, settings) -> Path:
    """Masked-LM with the pure-NumPy Mini-BERT: the same data pipeline (its batches as arrays),
    a checkpoint the torch side loads (config, safetensors and the tokenizer files)."""
    from . import numpy_ref

    if job.device not in ("auto", "cpu"):
        raise BertkitError("the NumPy backend runs on the CPU only")
    check_vocab_fits(tokenizer, config.vocab_size, config.type_vocab_size)
    _write_job(job, Path(job.out_dir))  # the run's settings, as a torch run records them
    max_length = job.max_length or min(128, config.max_positions)
    if max_length > config.max_positions:
        raise BertkitError(f"max_length {max_length} is longer than {job.model} can take ({config.max_positions} tokens)")
    data, held_out = _data(job, config.family, tokenizer, train_corpus, eval_corpus, max_length)

    def arrays(batch):
        return {k: v.numpy() for k, v in batch.items()}

    model = numpy_ref.build(config, seed=settings.seed)
    out = job.out_dir
    say(f"mlm on {job.model} with the NumPy backend, "
        + (f"budget {settings.time_budget:.0f} s" if settings.time_budget
           else f"{settings.steps} step{'s' * (settings.steps != 1)}")
        + " (it keeps no checkpoints: an interrupted run starts over)")
    trainer = numpy_ref.Trainer(model, lambda i: arrays(data.batch_at(i)), settings, out,
                                [arrays(b) for b in held_out])
    trainer.fit(progress=job.train.get("progress", True))
    from .interop.hf import FAMILIES
    from .train.loop import plot_curves

    tokenizer.save(out, FAMILIES[config.family].tokenizer_class, config.max_positions)
    plot_curves(out / "metrics.jsonl", out / "loss_curve.png")
    return out
