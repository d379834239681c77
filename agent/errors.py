"""Errors for expected mistakes: the CLI prints their message as one line, no traceback."""

ERROR_LINE_CHARS = 160


class UserError(Exception):
    """A mistake the user can fix (bad input, missing model, bad config); exit status 2."""


def error_line(exc: BaseException, limit: int = ERROR_LINE_CHARS) -> str:
    """An unexpected exception as one short line for a log or a turn record, since a turn
    record holds one line per recovered failure: its type and its message's first line."""
    first = (str(exc).strip().splitlines() or [""])[0]
    text = " ".join(first.split())
    return f"{type(exc).__name__}: {text}"[:limit] if text else type(exc).__name__
