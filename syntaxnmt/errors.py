"""User-facing errors.

A :class:`UserError` is a mistake in the user's input (a file, a config, a command-line value).
The CLI prints its message on one line and exits with status 2, never with a traceback.
"""


class UserError(Exception):
    """A user mistake; the message names the file, line or key at fault."""
