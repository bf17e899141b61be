"""Reading the small JSON files checkpoints carry, with errors that name the file and line."""

from __future__ import annotations

import json
from pathlib import Path

from .errors import BertkitError


def read_json(path: Path) -> dict:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise BertkitError(f"{path}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None
    except UnicodeDecodeError as e:
        raise BertkitError(f"{path}: not UTF-8 text (byte {e.start})") from None
    if not isinstance(data, dict):
        raise BertkitError(f"{path}: expected a JSON object at the top level")
    return data
