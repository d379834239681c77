"""What the agent prints of text it does not control: credentials masked, client text clipped.

Secret settings are ``SecretStr`` (printed as ``**********``); a URL may carry a user and
password (``https://user:pass@host/v1``), so any URL shown is shown with its password
masked. Clients choose what they send, so a log line never carries it at full length.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

MASK = "**********"
URL_WITH_PASSWORD = re.compile(r"\b([a-z][a-z0-9+.-]*://[^/\s:@]*:)[^/\s@]+@", re.IGNORECASE)
LOG_TEXT_CHARS = 80
# How protocol parsers report what they ignored: a warning function (often rate-limited).
Warn = Callable[..., None]


def redact_text(text: str) -> str:
    """Any URL passwords in a line of text (an error message, a log line) masked."""
    return URL_WITH_PASSWORD.sub(rf"\g<1>{MASK}@", text)


def redact_values(data: Any) -> Any:
    """``data`` (settings as plain values) with every URL password masked."""
    if isinstance(data, dict):
        return {key: redact_values(value) for key, value in data.items()}
    if isinstance(data, list):
        return [redact_values(value) for value in data]
    if isinstance(data, str):
        return redact_text(data)
    return data


def clip_text(value: object, limit: int = LOG_TEXT_CHARS) -> str:
    """A client-provided value as it may appear in a log line: repr'd, at most ``limit`` chars."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"
