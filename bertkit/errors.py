"""The one exception type users see: a message meant to be printed as a single line."""


class BertkitError(ValueError):
    """Bad user input (a file, key, shape or name); the CLI prints it without a traceback."""


def first_line(error: BaseException) -> str:
    """The first line of an exception's message for a one-line error, or its type's name where
    the message is empty (torch's EOFError on an empty file has none)."""
    return (str(error).strip().splitlines() or [type(error).__name__])[0]
