"""The one exception type users see: a message meant to be printed as a single line; and where a
warning says it came from."""

import re
import sys

# modules whose frames a warning is not blamed on: bertkit's, and the context managers and
# decorators (torch.no_grad) it runs in
_PASSED_THROUGH = ("contextlib", "torch.utils._contextlib", "functools")


class BertkitError(ValueError):
    """Bad user input (a file, key, shape or name); the CLI prints it without a traceback."""


def first_line(error: BaseException) -> str:
    """The first line of an exception's message for a one-line error, or its type's name where
    the message is empty (torch's EOFError on an empty file has none)."""
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def outside_stacklevel() -> int:
    """warnings.warn's stacklevel, called from the function that warns, for the first frame
    outside bertkit (and the context managers it runs in): a warning from the Python API names the
    caller's line, not one inside bertkit or contextlib.py."""
    frame, level = sys._getframe(1), 1  # the warning function's frame is level 1
    while frame is not None and _passed_through(frame.f_globals.get("__name__", "")):
        frame, level = frame.f_back, level + 1
    return level


def _passed_through(module: str) -> bool:
    return module == "bertkit" or module.startswith("bertkit.") or module in _PASSED_THROUGH


def refused_global(error: BaseException) -> str | None:
    """The class or function (os.system, a custom class) that torch.load(weights_only=True)
    refused to unpickle, as its error names it; None for any other failure (torch's text begins
    "Weights only load failed" whatever stopped it, a text file as much as a pickled class)."""
    found = re.search(r"GLOBAL ([\w.]+)", str(error))
    return found[1] if found else None
