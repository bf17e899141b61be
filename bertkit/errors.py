"""The one exception type users see: a message meant to be printed as a single line."""

import re


class BertkitError(ValueError):
    """Bad user input (a file, key, shape or name); the CLI prints it without a traceback."""


def first_line(error: BaseException) -> str:
    """The first line of an exception's message for a one-line error, or its type's name where
    the message is empty (torch's EOFError on an empty file has none)."""
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def refused_global(error: BaseException) -> str | None:
    """The class or function (os.system, a custom class) that torch.load(weights_only=True)
    refused to unpickle, as its error names it; None for any other failure (torch's text begins
    "Weights only load failed" whatever stopped it, a text file as much as a pickled class)."""
    found = re.search(r"GLOBAL ([\w.]+)", str(error))
    return found[1] if found else None
