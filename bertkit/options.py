"""Typed options for the command line and config files: every value is checked against the type
of the dataclass field it sets, and an unknown key is an error that names the file and key
(DESIGN.md, style rule 12: config overrides are typed, unknown keys are errors).

    fields_of(TrainSettings)                        # {"lr": float, "steps": int | None, ...}
    typed(TrainSettings, {"lr": "3e-4"}, "--set")   # {"lr": 0.0003}
    read_config("job.toml")                         # a dict from TOML or JSON
    seconds("1h30m")                                # 5400.0

Torch-free, so the NumPy backend and the CLI's argument parsing can use it without loading torch.
"""

from __future__ import annotations

import dataclasses
import json
import re
import sys
import types
import typing
from pathlib import Path
from typing import Any

from .errors import BertkitError
from .files import read_text

# every number has its unit, or the whole is one number of seconds: "1h30" (90 minutes? 1 h 30 s?) is refused
_DURATION = re.compile(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s)?")
_PLAIN_SECONDS = re.compile(r"\d+(?:\.\d+)?")


def seconds(text: str | float | int) -> float:
    """A duration: plain seconds (600, "600", "90s") or hours/minutes ("10m", "1h30m", "1.5h")."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = float(text)
    else:
        text = str(text).strip().lower()
        match = _DURATION.fullmatch(text + "s" if _PLAIN_SECONDS.fullmatch(text) else text)
        if not str(text).strip() or match is None or not any(match.groups()):
            raise BertkitError(f"{text!r} is not a duration (use e.g. 600, 90s, 10m, 1h30m)")
        h, m, s = (float(g) if g else 0.0 for g in match.groups())
        value = 3600 * h + 60 * m + s
    if value <= 0:
        raise BertkitError(f"a duration must be positive, got {text!r}")
    return value


def fields_of(cls) -> dict[str, Any]:
    """Field name -> resolved type annotation of a dataclass."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def _options(tp) -> tuple[list, bool]:
    """The concrete types of an annotation and whether None is allowed (`int | None`)."""
    if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
        args = list(typing.get_args(tp))
        return [a for a in args if a is not type(None)], type(None) in args
    return [tp], False


def _from_text(tp, text: str):
    if tp is bool:
        lowered = text.strip().lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        raise ValueError("expected true or false")
    if tp in (int, float, str):
        return tp(text)
    raise ValueError(f"cannot read a {tp} from text")


def _from_value(tp, value, text: bool):
    """A value already typed by TOML/JSON (or a list of strings for a tuple), checked; text
    (from a flag, if `text`) read as the type."""
    origin = typing.get_origin(tp)
    if isinstance(value, str) and tp is not str and not text:  # "yes" in a file is text, not a boolean
        raise ValueError(f"expected {'a list' if origin is tuple else tp.__name__}, not text in quotes")
    if origin is tuple:
        inner = typing.get_args(tp)
        if isinstance(value, str):  # "0.9,0.999" from a flag
            value = [part.strip() for part in value.split(",") if part.strip()]
        if not isinstance(value, (list, tuple)):
            raise ValueError("expected a list")
        if len(inner) == 2 and inner[1] is Ellipsis:
            inner = (inner[0],) * len(value)
        if len(inner) != len(value):
            raise ValueError(f"expected {len(inner)} values, got {len(value)}")
        return tuple(_coerce(t, v, text) for t, v in zip(inner, value))
    if isinstance(value, str) and tp is not str:
        return _from_text(tp, value)
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if tp is bool and not isinstance(value, bool):
        raise ValueError("expected true or false")
    if tp is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise ValueError("expected an integer")
    if tp in (int, float, str, bool) and not isinstance(value, tp):
        raise ValueError(f"expected {tp.__name__}")
    return value


def _coerce(tp, value, text: bool = True):
    choices, nullable = _options(tp)
    if value is None or (nullable and isinstance(value, str) and value.strip().lower() in ("none", "null")):
        if nullable:
            return None
        raise ValueError("may not be empty (none)")
    errors = []
    for choice in choices:
        try:
            return _from_value(choice, value, text)
        except (ValueError, TypeError) as e:
            errors.append(str(e))
    raise ValueError("; ".join(errors))


def _type_name(tp) -> str:
    choices, nullable = _options(tp)
    names = [getattr(c, "__name__", str(c)) if typing.get_origin(c) is None else str(c) for c in choices]
    return " or ".join(names + (["none"] if nullable else []))


def typed(cls, values: dict[str, Any], where: str, text: bool = True) -> dict[str, Any]:
    """`values` (strings from flags, or TOML/JSON values) converted to the types of `cls`'s
    fields; `where` names the source in errors (a file, or "--override"). With text=False (a
    config file's values) a string is taken only where the field is text: TOML and JSON write
    numbers and booleans as such, so "yes" or "2" in quotes is a mistake, not a spelling."""
    known = fields_of(cls)
    out = {}
    for key, value in values.items():
        if key not in known:
            raise BertkitError(f"{where}: {unknown_key(key, known)}")
        try:
            out[key] = _coerce(known[key], value, text)
        except (ValueError, TypeError) as e:  # (a file's value as the file writes it: true, "2")
            shown = repr(value) if text else spelled(value)
            raise BertkitError(f"{where}: {key} = {shown} is not a valid {_type_name(known[key])} ({e})") from None
    return out


def unknown_key(key: str, known) -> str:
    """'unknown key 'x' (did you mean y?); known: ...', the nearest known key in spelling if any."""
    import difflib

    near = difflib.get_close_matches(key, list(known), n=1)
    hint = f" (did you mean {near[0]}?)" if near else ""
    return f"unknown key {key!r}{hint}; known: {', '.join(sorted(known))}"


def spelled(value) -> str:
    """A setting's value as a config file or a flag writes it (true, none, "text", [1, 2]), not as
    Python does (True, None, 'text', (1, 2))."""
    return "none" if value is None else json.dumps(value, default=str)


def time_budget(value, where: str) -> float | None:
    """A time budget as a flag or a file gives it: seconds, a duration ("10m"), or none (TOML has
    no null); a bad one names `where`."""
    if value is None or (isinstance(value, str) and value.strip().lower() in ("none", "null")):
        return None
    try:
        return seconds(value)
    except BertkitError as e:
        raise BertkitError(f"{where}: {e}") from None


def check_config_paths(path: str | Path, values: dict[str, Any], keys, named=lambda key, value: False) -> None:
    """The paths among a config file's `values` (at `keys`): not empty (corpus = "" would read
    the working folder), and read from the working directory, as flags' are; one missing there
    but lying beside the file is named, with both places. `named(key, value)`: the value is a
    name, not a path (a built-in corpus, a preset)."""
    for key in keys:
        value = values.get(key)
        if not isinstance(value, str):
            continue
        if not value.strip():
            raise BertkitError(f"{path}: {key} = {value!r} is an empty path; give a file or folder, or leave the "
                               "key out")
        beside = Path(path).parent / Path(value).expanduser()
        if key != "out" and not named(key, value) and not Path(value).expanduser().exists() and beside.exists() \
                and Path(path).parent != Path():
            raise BertkitError(f"{path}: {key} = {value!r} is read from the working directory ({Path.cwd()}), as "
                               f"a flag's path is, and is not there; the one beside the file is {beside}: give "
                               "that path, or an absolute one")


def key_values(pairs: list[str], where: str) -> dict[str, str]:
    """["a=1", "b=x"] -> {"a": "1", "b": "x"} (values stay text; `typed` converts them)."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise BertkitError(f"{where}: expected KEY=VALUE, got {pair!r}")
        out[key.strip()] = value.strip()
    return out


def read_config(path: str | Path) -> dict[str, Any]:
    """A config file as a dict: TOML (.toml) or JSON (anything else)."""
    path = Path(path)
    if path.suffix.lower() in (".yaml", ".yml", ".ini", ".cfg"):
        raise BertkitError(f"{path}: config files are TOML (.toml) or JSON (.json), not {path.suffix}")
    text = read_text(path, "config file")
    if path.suffix.lower() == ".toml":
        try:
            import tomllib
        except ImportError:  # Python 3.10: the same parser, as a package (a dependency there)
            import tomli as tomllib

        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise BertkitError(f"{path}: not valid TOML ({e})") from None
    else:
        def once(pairs):  # a key given twice: refused, as TOML refuses it (json keeps the last)
            keys = [k for k, _ in pairs]
            twice = next((k for k in keys if keys.count(k) > 1), None)
            if twice is not None:
                raise BertkitError(f"{path}: key {twice!r} given twice")
            return dict(pairs)

        try:
            data = json.loads(text, object_pairs_hook=once)
        except json.JSONDecodeError as e:
            toml = "" if path.suffix.lower() == ".json" else "; a TOML file needs the .toml extension"
            raise BertkitError(f"{path}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg}){toml}") from None
    if not isinstance(data, dict):
        raise BertkitError(f"{path}: expected a table/object at the top level")
    if all(value == {} for value in data.values()):  # (its lines commented out, empty tables, the wrong file)
        print(f"bertkit: warning: {path} holds no settings: the defaults apply, and the flags given", file=sys.stderr)
    return data
