"""Numbers read out in groups (the corpus's dictation set: one speaker's recorded digits
joined, 8 kHz), through turn detection and streaming recognition at compute pace, on the
wideband and through the phone line's codec."""

from __future__ import annotations

import asyncio
import functools
import json
import re

import pytest

from agent import model_store
from agent.audio import load_audio
from agent.clock import ComputeClock
from agent.evaluation.grading import in_order
from agent.evaluation.text import word_count
from agent.evaluation.transcribe import TranscriptEvent, transcribe_stream
from agent.recognition.numbers import spoken_digits, written_digits
from agent.recognition.whisper_decoder import RATE, WhisperDecoder
from agent.settings import Settings
from agent.transports.g711 import through_phone_line
from agent.transports.replay import ReplayTurn
from tests.support.clips import CORPUS

DICTATION = CORPUS / "dictation"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not DICTATION.exists(), reason="needs ../shared/corpus/dictation"),
]


@functools.cache
def digits_read(name: str) -> str:
    rows = [json.loads(x) for x in (DICTATION / "manifest.jsonl").read_text().splitlines()]
    return next(r["digits"] for r in rows if r["file"] == name)


@pytest.fixture(scope="module")
def decoder(settings) -> WhisperDecoder:
    path = model_store.resolve(settings.asr.model, "asr", settings.models_dir)
    return WhisperDecoder(path, compute_type="int8", threads=1, language="en")


def heard(decoder: WhisperDecoder, name: str, line: str) -> list[TranscriptEvent]:
    """One clip as a call hears it, on ``line``, at compute pace."""
    settings = Settings()
    samples = load_audio(DICTATION / name, RATE)
    if line == "phone":
        settings, samples = settings.for_phone(), through_phone_line(samples)
    turn = ReplayTurn(name, samples)
    return asyncio.run(transcribe_stream(decoder, turn, settings, ComputeClock()))


def finals_after_interims(events: list[TranscriptEvent]) -> list[tuple[str, str]]:
    """(the turn's last interim, its final) for each turn."""
    pairs, last = [], ""
    for event in events:
        if event.kind == "interim":
            last = event.text
        elif event.kind == "final":
            pairs.append((last, event.text))
            last = ""
    return pairs


# Before: the first group's final was empty (its digits, at 8 kHz, scored 0.52-0.55 of no
# speech and were dropped as noise, and the turn restarted without them), or the last
# group's was (the pass that hears the previous groups again stopped before the new audio).
@pytest.mark.parametrize("name", ["fsdd_yweweler_5-5-5_11.wav", "fsdd_lucas_4-4-4-4_02.wav"])
def test_no_final_is_empty_or_shorter_than_the_interims_of_its_turn(decoder, name):
    events = heard(decoder, name, "phone")
    pairs = finals_after_interims(events)
    assert pairs
    for interim, final in pairs:
        assert word_count(final) >= word_count(interim), (interim, final, events)


def test_a_digit_said_three_times_is_no_loop_to_cut(decoder):
    """ "8 6 3 5 5 5 2 9 ..." came out "A 6 3 5": the final was cut at "5 5 5" as a loop."""
    name = "fsdd_nicolas_5-5-5_03.wav"
    finals = [e.text for e in heard(decoder, name, "phone") if e.kind == "final"]
    said = "".join(spoken_digits(text) for text in finals)
    assert in_order(said, digits_read(name)) >= 10, finals


@pytest.mark.parametrize("name", ["fsdd_george_6-6_06.wav", "fsdd_theo_3-4_04.wav"])
def test_a_number_read_out_comes_out_as_digits_in_order(decoder, name):
    """Written as a caller would read it back: each turn's digits joined ("715126", not
    "7 1 5 1 2 6" or "zero, nine, three"), all of them, in order."""
    finals = [e.text for e in heard(decoder, name, "wideband") if e.kind == "final"]
    said = "".join(spoken_digits(text) for text in finals)
    assert in_order(said, digits_read(name)) == len(digits_read(name)), finals
    assert all(written_digits(text) == text for text in finals), finals
    assert any(re.fullmatch(r"[0-9]{3,}[.,?!]?", text) for text in finals), finals
