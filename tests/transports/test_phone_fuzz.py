"""Fuzzing the phone endpoint's message parsing: whatever a client sends, the parser
answers with a message, None, or its own ``TwilioProtocolError``, never anything else
(an unexpected exception would end the call with "internal error" instead of a warning).
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.redact import LOG_TEXT_CHARS, clip_text
from agent.transports.browser import parse_control
from agent.transports.twilio import (
    StreamInfo,
    TwilioProtocolError,
    media_payload,
    parse_message,
    read_start,
)

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=20,
)  # fmt: skip
EVENTS = st.sampled_from(["connected", "start", "media", "mark", "stop", "dtmf"]) | st.text()
# Messages shaped like Twilio's, with every field free to be the wrong type.
TWILIO_LIKE = st.fixed_dictionaries(
    {"event": EVENTS},
    optional={
        "streamSid": JSON_VALUES,
        "start": st.fixed_dictionaries(
            {},
            optional={
                "streamSid": JSON_VALUES,
                "callSid": JSON_VALUES,
                "mediaFormat": st.fixed_dictionaries(
                    {},
                    optional={
                        "encoding": st.just("audio/x-mulaw") | JSON_VALUES,
                        "sampleRate": st.just(8000) | JSON_VALUES,
                        "channels": st.just(1) | JSON_VALUES,
                    },
                )
                | JSON_VALUES,
            },
        )
        | JSON_VALUES,
        "media": st.fixed_dictionaries(
            {},
            optional={
                "payload": st.binary(max_size=64).map(lambda b: __import__("base64")
                                                      .b64encode(b).decode()) | JSON_VALUES,
                "track": st.sampled_from(["inbound", "outbound"]) | JSON_VALUES,
            },
        )
        | JSON_VALUES,
    },
)  # fmt: skip
# What json.loads chokes on in other ways than JSONDecodeError.
NASTY = st.sampled_from(
    ["[" * 100_000, '{"a":' * 50_000, "1" * 5000, '{"event": ' + "9" * 5000 + "}", "\ud800",
     '"\\ud800"', "NaN", '{"event": "media", "media": {"payload": "' + "A" * 60_000 + '"}}']
)  # fmt: skip
RAW = (
    st.binary(max_size=256)
    | st.text(max_size=256)
    | JSON_VALUES.map(json.dumps)
    | TWILIO_LIKE.map(json.dumps)
    | NASTY
)


def parse_one(raw: str | bytes) -> dict[str, Any] | None:
    """Everything the server does to understand one message, the way it does it."""
    message = parse_message(raw)
    if message is None:
        return None
    assert isinstance(message, dict) and isinstance(message["event"], str)
    if message["event"] == "start":
        stream = StreamInfo()
        read_start(message, stream)
        assert isinstance(stream.stream_sid, str) and stream.stream_sid
        assert stream.call_sid is None or isinstance(stream.call_sid, str)
    elif message["event"] == "media":
        payload = media_payload(message)
        assert payload is None or isinstance(payload, bytes)
    return message


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(RAW)
def test_phone_parser_raises_only_its_own_error(raw: str | bytes) -> None:
    try:
        parse_one(raw)
    except TwilioProtocolError as exc:
        # Its text goes to a log line and a close reason: client parts are clipped.
        assert len(str(exc)) < 300


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=256) | JSON_VALUES.map(json.dumps) | NASTY)
def test_browser_control_parser_never_raises(raw: str) -> None:
    message = parse_control(raw)
    assert message is None or isinstance(message, dict)


def test_the_nasty_inputs_are_ignored_not_raised() -> None:
    """Deep nesting and over-long numbers raise RecursionError / ValueError in json.loads."""
    for raw in ("[" * 100_000, "1" * 5000):
        assert parse_message(raw) is None
        assert parse_control(raw) is None


@given(st.text() | st.binary() | JSON_VALUES)
def test_client_text_in_logs_is_clipped(value: object) -> None:
    assert len(clip_text(value)) <= LOG_TEXT_CHARS
