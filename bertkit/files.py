"""Reading the small text and JSON files users and checkpoints give, with errors that name the
file and line."""

from __future__ import annotations

import json
from pathlib import Path

from .errors import BertkitError


def read_text(path: str | Path, what: str = "file") -> str:
    """A UTF-8 text file; a missing file or other bytes are one BertkitError line."""
    path = Path(path)
    if not path.is_file():
        raise BertkitError(f"{path}: no such {what}")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise BertkitError(f"{path}: not UTF-8 text (byte {e.start})") from None


def read_json(path: Path) -> dict:
    try:
        data = json.loads(read_text(path))
    except json.JSONDecodeError as e:
        raise BertkitError(f"{path}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None
    if not isinstance(data, dict):
        raise BertkitError(f"{path}: expected a JSON object at the top level")
    return data
