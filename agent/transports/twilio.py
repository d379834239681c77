"""The Twilio Media Streams protocol: what the phone side sends, checked, and the ids we keep.

Inbound (JSON text messages): ``connected``, ``start`` (carries ``streamSid`` and the media
format), ``media`` (base64 G.711 mu-law, 8 kHz mono, 20 ms per message), ``mark`` (a mark
we sent has been played), ``stop``. Outbound: ``media`` (same format), ``mark`` after each
spoken phrase, and ``clear`` on barge-in so the phone drops the audio it has buffered.
Parsing is pure (no socket, no pipeline), so it can be fuzzed on its own.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass, field
from typing import Any

from loguru import logger

from agent.redact import Warn, clip_text
from agent.transports.g711 import PHONE_RATE

# Twilio's ids are two letters and 32 hex digits; other Media Streams servers use UUIDs.
# Whatever matches this is safe to keep and echo; anything else ends the call.
SID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
MARK_PREFIX = "phrase-"


@dataclass
class StreamInfo:
    """What the phone side told us in its ``start`` message, and the marks it played.

    Only the names of marks we sent and that have not come back yet are kept: a client
    cannot make the server hold the names it makes up.
    """

    stream_sid: str = ""
    call_sid: str | None = None
    custom_parameters: dict[str, Any] = field(default_factory=dict, repr=False)
    marks_sent: int = 0
    marks_played: int = 0
    _unplayed: set[str] = field(default_factory=set, repr=False)

    def next_mark(self) -> str:
        """The name of the mark to send after a phrase (and remember)."""
        self.marks_sent += 1
        name = f"{MARK_PREFIX}{self.marks_sent}"
        self._unplayed.add(name)
        return name

    def mark_played(self, name: object) -> bool:
        """Count a mark the phone says it played; False for a name we never sent."""
        if isinstance(name, str) and name in self._unplayed:
            self._unplayed.discard(name)
            self.marks_played += 1
            return True
        return False


class TwilioProtocolError(Exception):
    """The phone side sent something the call cannot go on with."""


def parse_message(text: str | bytes, warn: Warn = logger.warning) -> dict[str, Any] | None:
    """One inbound message as a dict, or None (with one ``warn`` line) when it is not one.

    Pure apart from that line: it never raises, whatever the client sent (deep nesting and
    over-long numbers make ``json.loads`` raise RecursionError / ValueError, not only
    JSONDecodeError).
    """
    if isinstance(text, bytes):
        warn("phone: ignored a binary message (Twilio media streams send JSON text)")
        return None
    try:
        message = json.loads(text)
    except (ValueError, RecursionError):
        warn("phone: ignored a message that is not JSON: {}", clip_text(text))
        return None
    if not isinstance(message, dict) or not isinstance(message.get("event"), str):
        warn("phone: ignored a message without an 'event' name: {}", clip_text(text))
        return None
    return message


def valid_sid(value: object) -> bool:
    """Whether a stream or call id is one we may keep and echo back."""
    return isinstance(value, str) and SID_PATTERN.fullmatch(value) is not None


def read_start(message: dict[str, Any], stream: StreamInfo) -> None:
    """Check a ``start`` message's ids and media format, and keep them."""
    start = message.get("start") if isinstance(message.get("start"), dict) else {}
    sid = message.get("streamSid") or start.get("streamSid")
    if not isinstance(sid, str) or not sid:
        raise TwilioProtocolError("the start message has no streamSid")
    call_sid = start.get("callSid")
    if not valid_sid(sid) or (call_sid is not None and not valid_sid(call_sid)):
        raise TwilioProtocolError("the start message's streamSid or callSid is not a valid id")
    fmt = start.get("mediaFormat") if isinstance(start.get("mediaFormat"), dict) else {}
    encoding = fmt.get("encoding", "audio/x-mulaw")
    rate = fmt.get("sampleRate", PHONE_RATE)
    channels = fmt.get("channels", 1)
    if (encoding, rate, channels) != ("audio/x-mulaw", PHONE_RATE, 1):
        raise TwilioProtocolError(
            f"unsupported media format {clip_text(encoding, 40)} {clip_text(rate, 20)} Hz "
            f"x{clip_text(channels, 20)}: only audio/x-mulaw 8000 Hz mono is spoken here"
        )
    stream.stream_sid = sid
    stream.call_sid = call_sid
    params = start.get("customParameters")
    stream.custom_parameters = params if isinstance(params, dict) else {}


def media_payload(message: dict[str, Any], warn: Warn = logger.warning) -> bytes | None:
    """The mu-law bytes of a ``media`` message (None, with a warning, when malformed)."""
    media = message.get("media")
    payload = media.get("payload") if isinstance(media, dict) else None
    if not isinstance(payload, str):
        warn("phone: ignored a media message without a payload")
        return None
    if isinstance(media, dict) and media.get("track", "inbound") != "inbound":
        return None  # an outbound-track echo: not the caller
    try:
        return base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        warn("phone: ignored a media message whose payload is not base64")
        return None
