"""Reading the small text and JSON files users and checkpoints give, with errors that name the
file and line.

One way in for user files: `byte_lines` (gzip decompressed on the fly, told by its magic bytes)
and `read_text` on top of it (UTF-8, a byte-order mark dropped since Excel writes one by default,
other bytes one error line); `csv_records` for CSV / TSV read strictly, so a stray quote or comma
is an error rather than rows silently merged or shifted; `shown` for file content quoted in an
error line.

And one way out: `output_dir` and `output_file` check where a command will write before it does
any work, so a run of minutes does not end in a traceback about a path, and a model or a finished
run already there is not overwritten."""

from __future__ import annotations

import contextlib
import csv
import gzip
import io
import json
import math
import os
import re
import shutil
import sys
import tempfile
import time
import zlib
from pathlib import Path
from typing import Callable, Iterable, Iterator

from .errors import BertkitError, first_line

GZIP_MAGIC = b"\x1f\x8b"
MODEL_FILES = ("config.json", "model.safetensors", "pytorch_model.bin")
# What a saved tokenizer may write (each family's files), and so what a saved model may overwrite
TOKENIZER_OUTPUTS = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                     "vocab.txt", "vocab.json", "merges.txt", "spm.model", "spiece.model")
# A finished run's results and model: a new run into a folder holding one would overwrite it
RESULT_FILES = ("metrics.json", "task.json", *MODEL_FILES, *TOKENIZER_OUTPUTS)


def data_suffix(path: Path) -> str:
    """The suffix that names the format, looking through a trailing .gz (train.csv.gz is a CSV)."""
    return Path(path.name.lower().removesuffix(".gz")).suffix


def checked_file(path: str | Path, what: str = "file") -> Path:
    """`path`, if it is a file (or a pipe: `--input <(cmd)` gives /dev/fd/63); a folder or a
    missing path is one BertkitError line saying which."""
    path = Path(path)
    if path.is_dir():
        raise BertkitError(f"{path}: a directory, not a {what}")
    if not path.exists():
        raise BertkitError(f"{path}: no such {what}")
    return path


def byte_lines(path: str | Path, what: str = "file") -> Iterator[bytes]:
    """The file's lines as bytes, decompressed when the file is gzip (so corpus.txt.gz is read as
    the text it holds, not as compressed noise); a missing file, a folder or damaged gzip data is
    one BertkitError line."""
    path = checked_file(path, what)
    with open(path, "rb") as raw:
        yield from stream_lines(raw, str(path))


def stream_lines(raw: io.BufferedIOBase, name: str) -> Iterator[bytes]:
    """The lines of an open binary stream (a file, a pipe, standard input), decompressed when it
    is gzip; damaged gzip data is one BertkitError line naming `name`."""
    raw = raw if hasattr(raw, "peek") else io.BufferedReader(raw)  # (a BytesIO has no peek)
    compressed = raw.peek(2)[:2] == GZIP_MAGIC  # looked at, not read: a pipe cannot be read twice
    with gzip.GzipFile(fileobj=raw) if compressed else contextlib.nullcontext(raw) as f:
        try:
            yield from f
        except (EOFError, zlib.error, gzip.BadGzipFile) as e:
            raise BertkitError(f"{name}: damaged gzip data ({e})") from None


def not_text(path: str | Path) -> str | None:
    """Why a file (decompressed, if gzip) cannot be UTF-8 text, from its first 8 KiB: a UTF-16
    byte-order mark (Windows' "Unicode"), or NUL bytes (a binary file: an image, compiled code);
    None when it may be text."""
    head = b""
    for line in byte_lines(path):
        head += line
        if len(head) >= 8192:
            break
    head = head[:8192]
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        return "UTF-16 text (a UTF-16 byte-order mark); save it as UTF-8"
    if b"\x00" in head:
        return "a binary file (NUL bytes), not text"
    return None


def read_text(path: str | Path, what: str = "file") -> str:
    """A UTF-8 text file (or gzip of one) without its byte-order mark; a missing file or other
    bytes are one BertkitError line."""
    return decode_text(b"".join(byte_lines(path, what)), str(path))


def text_lines(text: str) -> list[str]:
    r"""A text's lines, split at "\n" alone (a "\r\n" ending is one), as `wc -l`, `tokenizers` and
    JSON Lines count them: str.splitlines() also splits at \r, \v, \f, \x1c-\x1e, \x85, U+2028
    and U+2029, which real text holds inside a line (form feeds in PDF text, U+2028 inside a valid
    JSON string), and so gave more results than input lines, or a JSON line cut in two."""
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def decode_text(data: bytes, source: str) -> str:
    """UTF-8 bytes (a file's, standard input's) as text without a byte-order mark; other bytes
    are one BertkitError line naming `source` and the line: UTF-16 or UTF-32 (by its mark, or
    without one by its NUL bytes, which no text holds, as a binary file's) and other encodings."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):  # (UTF-32's little-endian mark starts so too)
        raise BertkitError(f"{source}: UTF-16 or UTF-32 text (it starts with that byte-order mark); save it as UTF-8")
    if b"\x00" in data:  # read as UTF-8, UTF-16's ASCII became column names and texts full of NULs
        line = data.count(b"\n", 0, data.index(b"\x00")) + 1
        raise BertkitError(f"{source}, line {line}: NUL bytes, not text (UTF-16 or UTF-32 without a byte-order "
                           "mark, or a binary file); save it as UTF-8")
    try:  # decoded as plain UTF-8 so the error's offset counts the mark's bytes too
        return data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        column = e.start - data.rfind(b"\n", 0, e.start)  # 1-based, in bytes, as the count from the start
        raise BertkitError(f"{source}, line {line}: not UTF-8 text at byte {column} of the line (byte {e.start + 1} "
                           "from the start); save it as UTF-8") from None


def read_plain(path: str | Path, what: str = "file") -> str:
    """A model's or tokenizer's own UTF-8 file (config.json, vocab.txt, tokenizer.json ...) read
    as it is: not decompressed, as transformers does not (a 290 KB gzip of a config took 650 MB
    to read); a missing file or other bytes are one BertkitError line."""
    return decode_text(checked_file(path, what).read_bytes(), str(path))


def read_json(path: Path, expect: type = dict):
    """A JSON file (a model's, a run's: read as it is, read_plain) whose top level is an object
    (or a list, with expect=list)."""
    return parse_json(read_plain(path), str(path), expect)


def parse_json(text: str, source: str, expect: type = dict):
    """JSON text (of the file `source` names) whose top level is an `expect` (dict, list, or
    object for anything); a parse error names the line and column."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise BertkitError(f"{source}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None
    except RecursionError:
        raise BertkitError(f"{source}: JSON nested too deeply to read") from None
    if not isinstance(data, expect):
        raise BertkitError(f"{source}: expected a JSON {'object' if expect is dict else 'list'} at the top level")
    return data


def positive_int(data: dict, key: str, path: Path) -> int | None:
    """data[key] from the JSON file `path` if it is a positive whole number, None if absent;
    anything else (a string, a bool, 0) is one error line naming the file and key."""
    value = data.get(key)
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
        raise BertkitError(f"{path}: {key} must be a positive whole number, got {value!r}")
    return value


def shown(text: str, limit: int = 80) -> str:
    """File content quoted in an error line: escaped unless printable (a NUL or an escape byte
    must not reach the terminal), cut to `limit` characters."""
    text = text if text.isprintable() else repr(text)[1:-1]
    return text if len(text) <= limit else text[:limit] + "..."


def csv_records(path: Path, lines: Iterable[str], tsv: bool = False) -> Iterator[tuple[int, list[str]]]:
    """(line where it starts, fields) for each record of a CSV (quotes may hold commas and
    newlines) or a TSV (tabs, no quoting, as GLUE writes them), the header first. Read strictly:
    a quote never closed (which would swallow every later row into one field), text after a
    closing quote, or a row with another number of fields than the header (which would shift
    texts into labels) is one error naming the line, and so is a header naming a column twice
    (which of the two would be read?). Blank rows are passed through as they are."""
    csv.field_size_limit(min(sys.maxsize, 2**31 - 1))  # long documents are fine
    reader = (csv.reader(lines, delimiter="\t", quoting=csv.QUOTE_NONE, strict=True) if tsv
              else csv.reader(lines, strict=True))
    start, width = 1, None
    while True:
        try:
            row = next(reader, None)
        except csv.Error as e:
            if str(e) == "unexpected end of data":
                problem = "a quote opened in this row is never closed"
            elif reader.line_num > start:
                problem = f"a quote opened in this row runs on to line {reader.line_num}, where it stops ({e})"
            else:
                problem = f"bad quoting ({e}); a quote inside a quoted field is written twice (\"\")"
            raise BertkitError(f"{path}, line {start}: {problem}") from None
        if row is None:
            return
        if any(cell.strip() for cell in row):
            if width is None:
                width = len(row)
                named = [c.strip() for c in row if c.strip()]
                twice = sorted({c for c in named if named.count(c) > 1})
                if twice:
                    raise BertkitError(f"{path}, line {start}: the header names column(s) {', '.join(map(repr, twice))} "
                                       "more than once")
            elif len(row) != width:
                hint = "; quote texts that hold commas" if len(row) > width and not tsv else ""
                raise BertkitError(f"{path}, line {start}: {len(row)} field(s) but the header has {width}{hint}")
        yield start, row
        start = reader.line_num + 1


def _named(flag: str, path: Path) -> str:
    """How an error names the path: after its flag when it came from one (--out), else alone."""
    return f"{flag} {path}" if flag else str(path)


def _writable_from(path: Path, flag: str) -> None:
    """`path` can be created or written: its nearest existing ancestor is a folder we may write,
    tried by making and removing a folder there (os.access says yes to root everywhere, even on
    /proc or a read-only mount, where the run's own mkdir then failed with a traceback)."""
    ancestor = path
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if ancestor != path and not ancestor.is_dir():
        raise BertkitError(f"{_named(flag, path)}: {ancestor} is a file, so no folder can be made under it")
    if not os.access(ancestor, os.W_OK | (os.X_OK if ancestor.is_dir() else 0)):  # a file has no search bit
        raise BertkitError(f"{_named(flag, path)}: no permission to write {'in ' if ancestor.is_dir() else ''}{ancestor}")
    folder = ancestor if ancestor.is_dir() else ancestor.parent
    try:
        os.rmdir(tempfile.mkdtemp(dir=folder, prefix=".bertkit-probe-"))
    except OSError as e:
        raise BertkitError(f"{_named(flag, path)}: cannot write in {folder} ({e.strerror or e})") from None


def staging_dir(parent: Path, prefix: str) -> Path:
    """A new folder in `parent` to write into and then rename into place. tempfile.mkdtemp makes
    it private (0700), and the folder it becomes (a checkpoint, a cached tokenizer) would stay so;
    it gets the permissions a plain mkdir gives instead (the umask's)."""
    path = Path(tempfile.mkdtemp(dir=parent, prefix=prefix))
    umask = os.umask(0)  # reading the umask means setting it: put it straight back
    os.umask(umask)
    path.chmod(0o777 & ~umask)
    return path


def output_dir(path: str | Path, keep: tuple[str, ...] = RESULT_FILES, flag: str = "--out",
               run_logs: bool = False) -> Path:
    """The folder a run writes into, checked before the run: not a file, writable, and holding
    none of `keep` (a finished run's metrics, a model or tokenizer files the run would overwrite;
    other files in it are left alone). With `run_logs`, the run writes metrics.jsonl and
    loss_curve.png too: an unfinished run's are rewritten by the rerun, but files of those names
    that are not a run's log (a user's own) are refused like `keep`'s. `flag` names where the path
    came from in errors ("" for an API argument)."""
    path = Path(path).expanduser()
    if path.exists() and not path.is_dir():
        raise BertkitError(f"{_named(flag, path)}: a file, not a folder")
    _writable_from(path, flag)
    held = [name for name in keep if (path / name).exists()]
    if run_logs and not _run_log(path / "metrics.jsonl"):
        held += [name for name in ("metrics.jsonl", "loss_curve.png") if (path / name).exists()]
    if held:
        raise BertkitError(f"{_named(flag, path)} already holds {', '.join(held)}, which this run would overwrite; "
                           "choose another folder or delete them")
    return path


def within_folder(name: str) -> bool:
    """Whether a file name a folder's own index names (a shard, a module folder) stays in that
    folder: not absolute, no '..' climbing out."""
    return not Path(name).is_absolute() and ".." not in Path(name).parts


def shard_files(index: Path) -> list[Path]:
    """The shards a weights index (model.safetensors.index.json) names in its weight_map. A shard
    is a file of the model's folder: a name that leaves it (absolute, or climbing with '..') is
    refused, so that a folder from elsewhere cannot make bertkit read files beside it. Symlinks
    are followed, as the Hub's cache keeps every file of a download as a link into its blobs/."""
    weight_map = read_json(index).get("weight_map", {})
    if not (isinstance(weight_map, dict) and all(isinstance(shard, str) for shard in weight_map.values())):
        raise BertkitError(f"{index}: weight_map must map tensor names to shard file names")
    shards = sorted(set(weight_map.values()))
    if not shards:
        raise BertkitError(f"{index}: weight_map is empty")
    for shard in shards:
        if not within_folder(shard):
            raise BertkitError(f"{index}: shard {shard!r} lies outside the model folder")
        if not (index.parent / shard).exists():
            raise BertkitError(f"{index}: shard {shard} is missing")
    return [index.parent / shard for shard in shards]


def shell_path(path) -> str:
    """A path as a hint's command writes it, so that the shell reads it back: quoted, and with ./
    before a leading '-', which would read as an option."""
    import shlex

    return shlex.quote(f"./{path}" if str(path).startswith("-") else str(path))


def _run_log(path: Path) -> bool:
    """Whether `path` is a run's metrics.jsonl: its first line a JSON object with a step and split,
    or the start of one that a kill or a full disk cut off (the rerun was refused until deleted)."""
    try:
        with open(path, encoding="utf-8") as f:
            line = f.readline()
    except (OSError, ValueError):  # (ValueError: not UTF-8)
        return False
    try:
        first = json.loads(line)
    except ValueError:
        return not line.endswith("\n") and line.startswith('{"step": ')
    return isinstance(first, dict) and "step" in first and "split" in first


# What bertkit's runs write beside a model (and the model's own files): a results file must not
# replace one (an evaluation written over a run's metrics.json lost its dev scores and step)
RUN_FILES = (*RESULT_FILES, "metrics.jsonl", "job.json", "loss_curve.png")


def output_file(path: str | Path, flag: str = "--out", reads: Iterable[str | Path] = ()) -> Path:
    """A file a command writes at its end, checked before it starts: not a folder, in a folder
    that exists or can be made, not one of a model folder's own files (RUN_FILES), and none of
    the files the command `reads` (its data would be replaced by the results)."""
    path = Path(path).expanduser()
    if path.is_dir():
        raise BertkitError(f"{_named(flag, path)}: a folder; give a file name")
    for source in reads:
        source = Path(source).expanduser()
        # (resolved: "new/../data.csv" is the data file once the folder `new` is made to write it)
        if source.exists() and (path.samefile(source) if path.exists() else path.resolve() == source.resolve()):
            raise BertkitError(f"{_named(flag, path)}: that is the file this command reads; give another file name")
    if path.name in RUN_FILES and path.exists() and any((path.parent / f).exists() for f in MODEL_FILES):
        raise BertkitError(f"{_named(flag, path)}: that is the model folder's own {path.name}; give another file name")
    _writable_from(path, flag)
    return path


@contextlib.contextmanager
def writing(what: str, where: Path, kept: Callable[[], str] | None = None):
    """A failed write inside (a full disk, a lost mount) as one line naming `what`, `where` and
    what survived (`kept()`). A full disk comes as OSError from Python, as RuntimeError from
    torch.save and as SafetensorError from safetensors."""
    from safetensors import SafetensorError

    try:
        yield
    except Exception as e:
        # `tokenizers` raises a plain Exception for an I/O error ("... (os error 28)")
        if not isinstance(e, (OSError, RuntimeError, SafetensorError)) and "(os error" not in str(e):
            raise
        reason = e.strerror if isinstance(e, OSError) and e.strerror else first_line(e)
        # torch's own words for a write cut short (a full disk, a file-size limit) are an internal
        # check ("[enforce fail at inline_container.cc] . unexpected pos ...")
        cut = "unexpected pos" in reason
        if cut:
            reason = "the file was cut short"
        try:
            left = shutil.disk_usage(where).free / 2**20
            nearly = "; the disk is nearly full" if left < 64 and "space" not in reason.lower() else ""
            if cut and not nearly:
                nearly = ", so a limit on file size (ulimit -f; FAT32's 4 GiB) or an I/O error stopped it"
            free = f" ({left:.1f} MiB free there{nearly})"
        except OSError:
            free = ""
        raise BertkitError(f"could not write {what} in {where}: {reason}{free}"
                           + (f"; {kept()}" if kept else "")) from None


LOCK_FILE = ".bertkit-run.lock"


def launch_rank() -> int:
    """This process's rank in a torchrun launch (RANK), 0 outside one; the first process writes
    and speaks for all."""
    return int(os.environ.get("RANK") or 0)


def launch_processes() -> int:
    """How many processes a torchrun launch runs (WORLD_SIZE), 1 outside one."""
    return int(os.environ.get("WORLD_SIZE") or 1)


def checkpoint_folders(out: Path) -> list[Path]:
    """OUT/checkpoints/step-NNNNNNNN folders, oldest first: only names a run writes (a folder a user
    renamed to step-00000009.bad is not a checkpoint to resume from)."""
    folder = Path(out) / "checkpoints"
    found = folder.glob("step-*") if folder.is_dir() else []
    return sorted(p for p in found if re.fullmatch(r"step-\d{8}", p.name) and p.is_dir())


STALE_STAGING_S = 3600  # a staging folder untouched this long is no save in progress


def remove_stale_staging(target: Path) -> None:
    """The staging folders a killed save_pretrained left in `target` (.saving-*, a partial
    model.safetensors each), once an hour old: a save still writing elsewhere into the same
    folder touched its own more lately."""
    now = time.time()
    for leftover in target.glob(".saving-*"):
        with contextlib.suppress(OSError):
            if leftover.is_dir() and now - leftover.stat().st_mtime > STALE_STAGING_S:
                shutil.rmtree(leftover)


def no_config(directory: Path) -> BertkitError:
    """The error for a model folder without config.json; a pre-training run's folder, interrupted
    before its final model, names its newest checkpoint, which loads."""
    message = f"{directory}: no config.json (not a Hugging Face model directory)"
    kept = checkpoint_folders(directory)
    if kept:
        message += f"; a pre-training run without its final model: its newest checkpoint, {kept[-1]}, loads"
    return BertkitError(message)


@contextlib.contextmanager
def run_lock(out: str | Path, flag: str = "--out"):
    """Hold OUT for one run: a second run writing the same folder at once (its log, checkpoints and
    model interleaved with this one's) is refused. An advisory lock (flock) on a file in OUT, which
    the system releases when the process ends, however it ends; the file goes when the run does
    (a run that locked the file just as it went tries the new one). Under torchrun the first
    process holds it for all. Folders this made and left empty (a run refused before it wrote
    anything) are removed again, and so are the staging folders a killed run left behind
    (.saving-*, .writing-*, checkpoints/.writing-*), which nothing else writes while the lock is
    held. Where locking is not possible (no fcntl, a path that is no folder, which the run's own
    checks then name), the run goes on unlocked."""
    out = Path(out).expanduser()
    try:
        import fcntl
    except ImportError:
        fcntl = None
    if fcntl is None or launch_rank() != 0 or (out.exists() and not out.is_dir()):
        yield
        return
    made = [p for p in (out, *out.parents) if not p.exists()]  # the folders mkdir makes, innermost first
    try:
        out.mkdir(parents=True, exist_ok=True)
        handle = _locked(out / LOCK_FILE, fcntl, flag)
    except OSError:
        yield
        return
    try:
        for leftover in [*out.glob(".saving-*"), *out.glob(".writing-*"), *(out / "checkpoints").glob(".writing-*")]:
            if leftover.is_dir():
                shutil.rmtree(leftover, ignore_errors=True)
        try:
            yield
        finally:
            (out / LOCK_FILE).unlink(missing_ok=True)
            for folder in made:
                if folder.is_dir() and not any(folder.iterdir()):
                    folder.rmdir()
    finally:
        handle.close()


def _locked(path: Path, fcntl, flag: str):
    """`path` opened and flock'ed, holding this process's id; a BertkitError if another run holds it."""
    while True:
        handle = open(path, "a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            handle.close()
            raise BertkitError(f"{_named(flag, path.parent)}: another bertkit run ({holder}) is writing there; "
                               "wait for it to end or choose another folder") from None
        try:
            current = os.stat(path)
        except FileNotFoundError:
            current = None
        mine = os.fstat(handle.fileno())
        if current is not None and (current.st_dev, current.st_ino) == (mine.st_dev, mine.st_ino):
            break
        handle.close()  # the run before removed this file as it ended: lock the one now there
    handle.seek(0)
    handle.truncate()
    handle.write(f"process {os.getpid()}")
    handle.flush()
    return handle


def json_safe(record: dict) -> dict:
    """`record` with NaN and infinite numbers as null: JSON has no NaN (Python writes a bare NaN that
    strict parsers refuse). Both trainers' metrics files go through it."""
    return {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in record.items()}


def write_text(path: Path, text: str, flag: str = "--out") -> None:
    """Write `text` to `path` (its folder made first) whole or not at all: a new file in the same
    folder, then renamed over it, so a failed or interrupted write (a full disk, Ctrl-C) leaves an
    earlier file as it was. An OS error is one line naming the path."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, partial = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".partial")
        os.close(fd)
        try:
            Path(partial).write_text(text)
            umask = os.umask(0)  # mkstemp's file is private (0600); give it what a plain open would
            os.umask(umask)
            os.chmod(partial, 0o666 & ~umask)
            os.replace(partial, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(partial)
            raise
    except OSError as e:
        raise BertkitError(f"{_named(flag, path)}: could not write it ({e.strerror or e})") from None
