"""Phone bridge: the Twilio Media Streams protocol over a websocket.

Inbound (JSON text messages): ``connected``, ``start`` (carries ``streamSid`` and the media
format), ``media`` (base64 G.711 mu-law, 8 kHz mono, 20 ms per message), ``mark`` (a mark
we sent has been played), ``stop``. Outbound: ``media`` (same format), ``mark`` after each
spoken phrase, and ``clear`` on barge-in so the phone drops the audio it has buffered.

The codec is plain numpy: G.711 mu-law both ways, and 8 <-> 16 kHz through one streaming
half-band FIR (97-tap Kaiser-windowed sinc, 3 ms delay, >60 dB alias rejection). soxr's
streaming resampler was measured for this first: its HQ/VHQ filters release audio in
blocks of about 100 ms (a 20 ms frame in, nothing out for four frames), which would add
that much latency to both directions, and its quick mode (QQ) has no anti-alias filter
(16 dB SNR against VHQ on Piper speech taken down to 8 kHz).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from loguru import logger
from pipecat.frames.frames import Frame, TTSTextFrame
from websockets.asyncio.connection import Connection
from websockets.exceptions import ConnectionClosed

from agent.clock import CallClock, CallRecorder
from agent.live.io import LiveInput, LiveOutput

PHONE_RATE = 8000
# Twilio's ids are two letters and 32 hex digits; other Media Streams servers use UUIDs.
# Whatever matches this is safe to keep and echo; anything else ends the call.
SID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
MARK_PREFIX = "phrase-"
Warn = Callable[..., None]
MULAW_BIAS = 0x84
MULAW_CLIP = 32635


def mulaw_decode(data: bytes) -> np.ndarray:
    """G.711 mu-law bytes -> int16 samples."""
    u = ~np.frombuffer(data, dtype=np.uint8).astype(np.int32) & 0xFF
    exponent = (u >> 4) & 0x07
    magnitude = (((u & 0x0F) << 3) + MULAW_BIAS) << exponent
    return np.where(u & 0x80, MULAW_BIAS - magnitude, magnitude - MULAW_BIAS).astype(np.int16)


def mulaw_encode(samples: np.ndarray) -> bytes:
    """int16 samples -> G.711 mu-law bytes."""
    x = samples.astype(np.int32)
    sign = np.where(x < 0, 0x80, 0)
    magnitude = np.minimum(np.abs(x), MULAW_CLIP) + MULAW_BIAS
    exponent = np.clip(np.floor(np.log2(magnitude)).astype(np.int32) - 7, 0, 7)
    mantissa = (magnitude >> (exponent + 3)) & 0x0F
    return (~(sign | (exponent << 4) | mantissa) & 0xFF).astype(np.uint8).tobytes()


def _half_band_taps(n: int = 97, cutoff_hz: float = 3700.0, rate: int = 16000) -> np.ndarray:
    fc = cutoff_hz / rate
    t = np.arange(n) - (n - 1) / 2
    taps = 2 * fc * np.sinc(2 * fc * t) * np.kaiser(n, 6.0)
    return taps / taps.sum()


class Rate2Converter:
    """Streaming 8 <-> 16 kHz conversion: low-pass at 3.7 kHz, then pick or stuff samples."""

    TAPS = _half_band_taps()

    def __init__(self, *, up: bool) -> None:
        self._up = up
        self._history = np.zeros(len(self.TAPS) - 1)
        self._phase = 0  # for down-sampling: whether the next 16 kHz sample is dropped

    def __call__(self, samples: np.ndarray) -> np.ndarray:
        if self._up:
            x = np.zeros(2 * len(samples))
            x[::2] = samples * 2.0
        else:
            x = samples.astype(np.float64)
        buf = np.concatenate([self._history, x])
        self._history = buf[len(buf) - len(self._history) :]
        y = np.convolve(buf, self.TAPS, mode="valid")
        if not self._up:
            y = y[self._phase :: 2]
            self._phase = (self._phase + len(x)) % 2
        return np.clip(np.round(y), -32768, 32767).astype(np.int16)

    def reset(self) -> None:
        self._history[:] = 0
        self._phase = 0


def through_phone_line(samples: np.ndarray) -> np.ndarray:
    """16 kHz audio as the agent hears it from a phone call (8 kHz mu-law, our resamplers):
    for benchmarks and tests that replay a phone call's audio without the socket."""
    narrow = mulaw_decode(mulaw_encode(Rate2Converter(up=False)(samples)))
    return Rate2Converter(up=True)(narrow)


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


class PhoneInput(LiveInput):
    """Caller audio from ``media`` messages: mu-law 8 kHz -> 16-bit PCM at the pipeline rate."""

    def __init__(self, clock: CallClock, recorder: CallRecorder, *, rate: int) -> None:
        if rate != 2 * PHONE_RATE:
            raise ValueError(f"the phone bridge needs a {2 * PHONE_RATE} Hz pipeline, not {rate}")
        super().__init__(clock, recorder, rate=rate)
        self._upsample = Rate2Converter(up=True)

    def feed_mulaw(self, payload: bytes) -> None:
        if self.admit(2 * len(payload)):  # before decoding: a flood costs no filtering
            self.enqueue(self._upsample(mulaw_decode(payload)).tobytes())


class PhoneOutput(LiveOutput):
    """Bot audio as ``media`` messages; a ``mark`` after each phrase; ``clear`` on barge-in."""

    def __init__(
        self, ws: Connection, stream: StreamInfo, clock: CallClock, recorder: CallRecorder,
        *, rate: int,
    ) -> None:  # fmt: skip
        super().__init__(clock, recorder, rate=rate)
        self._ws = ws
        self._stream = stream
        self._downsample = Rate2Converter(up=False)

    async def _send(self, message: dict[str, Any]) -> bool:
        text = json.dumps({**message, "streamSid": self._stream.stream_sid})
        try:
            return await self.bounded_send(lambda: self._ws.send(text))
        except ConnectionClosed:
            return False

    async def deliver(self, pcm: bytes) -> bool:
        ulaw = mulaw_encode(self._downsample(np.frombuffer(pcm, dtype=np.int16)))
        payload = base64.b64encode(ulaw).decode("ascii")
        return await self._send({"event": "media", "media": {"payload": payload}})

    async def flush_listener(self) -> None:
        self._downsample.reset()
        await self._send({"event": "clear"})

    async def write_transport_frame(self, frame: Frame) -> None:
        # A phrase's text is released once its audio has been written: mark that point,
        # so the phone tells us when the caller has heard it.
        if isinstance(frame, TTSTextFrame):
            name = self._stream.next_mark()
            await self._send({"event": "mark", "mark": {"name": name}})


LOG_TEXT_CHARS = 80


def clip_text(value: object, limit: int = LOG_TEXT_CHARS) -> str:
    """A client-provided value as it may appear in a log line: repr'd, at most ``limit`` chars.

    Clients choose what they send, so a log line never carries it at full length.
    """
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


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
