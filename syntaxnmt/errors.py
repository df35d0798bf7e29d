"""User-facing errors, and the stop by a signal.

A :class:`UserError` is a mistake in the user's input (a file, a config, a command-line value).
The CLI prints its message on one line and exits with status 2, never with a traceback.
:class:`Interrupted` ends a command stopped by SIGINT or SIGTERM (after training has saved its
checkpoint); the CLI exits with 128 + the signal number, as a shell reports a killed command.
"""

from __future__ import annotations

import signal


class UserError(Exception):
    """A user mistake; the message names the file, line or key at fault."""


MAX_ERROR_CHARS = 500


def error_line(message: object, limit: int = MAX_ERROR_CHARS) -> str:
    """``message`` as one printable line: line breaks become spaces and a message longer than
    ``limit`` characters is cut with an ellipsis and its length (a value quoted in an error may be
    huge: a whole YAML document, a line of gigabytes)."""
    text = str(message).replace("\r\n", " ").replace("\n", " ").replace("\r", " ")
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text)} characters in all)"


class Interrupted(BaseException):
    """A command stopped by a signal; ``exit_code`` is 128 + its number (130 SIGINT, 143 SIGTERM).

    A ``BaseException``, like ``KeyboardInterrupt``, so that no ``except Exception`` swallows it.
    """

    def __init__(self, signum: int, message: str = ""):
        self.signum = int(signum)
        self.exit_code = 128 + self.signum
        super().__init__(message or f"interrupted by {signal.Signals(self.signum).name}")
