"""The one exception type users see: a message meant to be printed as a single line."""


class BertkitError(ValueError):
    """Bad user input (a file, key, shape or name); the CLI prints it without a traceback."""
