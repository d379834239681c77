"""Errors for expected mistakes: the CLI prints their message as one line, no traceback."""


class UserError(Exception):
    """A mistake the user can fix (bad input, missing model, bad config); exit status 2."""
