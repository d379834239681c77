"""A caller's acknowledgement over the bot ("yes", "right", "mm-hmm") leaves the answer going;
anything else said over it ("no", "stop", a request) interrupts. The words (fast), and real
recordings of the corpus over a talking bot through the real detector and recogniser at
compute pace (slow)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest
from pipecat.frames.frames import (
    BotStartedSpeakingFrame,
    Frame,
    InputAudioRawFrame,
    InterruptionFrame,
    UserStartedSpeakingFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor

from agent.audio import load_audio
from agent.clock import ComputeClock
from agent.evaluation.transcribe import TranscriptCollector, TranscriptEvent
from agent.frames import HoldBotAudioFrame
from agent.pipeline import run_pipeline
from agent.recognition.streaming_stt import StreamingWhisperSTT
from agent.recognition.whisper_decoder import RATE, WhisperDecoder
from agent.settings import Settings
from agent.timing.call_recorder import CallRecorder
from agent.transports.replay import ReplayInput, ReplayTurn
from agent.turns.backchannel import is_backchannel
from agent.turns.detector import TurnDetector
from agent.turns.vad import TurnModels
from tests.support.clips import CORPUS
from tests.support.transcripts import normalise


@pytest.mark.parametrize(
    "text", ["Yeah.", "Mm-hmm.", "Uh-huh.", "Okay, okay.", "Right.", "Yes.", "I see.", "Hmm.", ""]
)
def test_acknowledgements_are_backchannels(text):
    assert is_backchannel(text)


@pytest.mark.parametrize(
    "text", ["Wait.", "No, stop.", "No.", "Actually I meant Tuesday.", "Yeah, but why?", "Stop."]
)
def test_anything_else_over_the_bot_is_an_interruption(text):
    assert not is_backchannel(text)


class TalkingBot(FrameProcessor):
    """The output's side of a call whose bot is talking from the first audio on: notes the
    holds, releases and interruptions that reach it."""

    def __init__(self, seen: list[str]) -> None:
        super().__init__()
        self._seen, self._talking = seen, False

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, InputAudioRawFrame) and not self._talking:
            self._talking = True
            await self.push_frame(BotStartedSpeakingFrame(), FrameDirection.UPSTREAM)
        if isinstance(frame, HoldBotAudioFrame):
            self._seen.append("hold" if frame.hold else "resume")
        elif isinstance(frame, InterruptionFrame | UserStartedSpeakingFrame):
            self._seen.append(type(frame).__name__)
        await self.push_frame(frame, direction)


@pytest.fixture(scope="module")
def decoder() -> WhisperDecoder:
    settings = Settings()
    return WhisperDecoder.from_settings(settings.asr, settings.models_dir)


def over_the_bot(decoder: WhisperDecoder, clip: Path) -> tuple[list[str], list[str]]:
    """The clip said 0.5 s into a bot's answer: what reached the output, and the finals."""
    settings, clock = Settings(), ComputeClock()
    seen: list[str] = []
    events: list[TranscriptEvent] = []
    silence = np.zeros(RATE // 2, np.int16)
    audio = np.concatenate([silence, load_audio(clip, RATE), silence, silence])
    pipeline = Pipeline(
        [
            ReplayInput(
                [ReplayTurn(clip.name, audio)],
                clock,
                CallRecorder(RATE),
                rate=RATE,
                answer_timeout_secs=3,
            ),  # fmt: skip
            TurnDetector(settings.turn, TurnModels.load(), clock, rate=RATE),
            StreamingWhisperSTT(decoder, settings.asr, clock, rate=RATE),
            TranscriptCollector(clip.name, clock, events),
            TalkingBot(seen),
        ]
    )
    asyncio.run(run_pipeline(pipeline, rate=RATE))
    return seen, [e.text for e in events if e.kind == "final"]


def corpus(pattern: str) -> list[Path]:
    return sorted(CORPUS.glob(pattern))


ACKS = corpus("backchannel/sc_yes_*.wav") + corpus("backchannel/sc_right_*.wav")
ACKS += corpus("backchannel/sc_wow_*.wav") + corpus("short/sc_yes_*.wav")
STOPS = corpus("short/sc_stop_*.wav") + corpus("backchannel/sc_no_*.wav")


@pytest.mark.slow
@pytest.mark.skipif(not ACKS, reason="needs ../shared/corpus")
@pytest.mark.parametrize("clip", ACKS, ids=lambda p: p.stem)
def test_an_acknowledgement_holds_the_answer_for_a_moment_and_lets_it_go_on(decoder, clip):
    seen, finals = over_the_bot(decoder, clip)
    assert seen[0] == "hold" and seen[-1] == "resume", seen
    assert "InterruptionFrame" not in seen and not finals, (seen, finals)


@pytest.mark.slow
@pytest.mark.skipif(not STOPS, reason="needs ../shared/corpus")
@pytest.mark.parametrize("clip", STOPS, ids=lambda p: p.stem)
def test_stop_or_no_over_the_bot_interrupts_it(decoder, clip):
    seen, finals = over_the_bot(decoder, clip)
    last_hold = len(seen) - 1 - seen[::-1].index("hold")
    assert seen[last_hold + 1 :].count("InterruptionFrame") == 1, seen  # held, then stopped
    assert "resume" not in seen[last_hold:] and len(finals) == 1, (seen, finals)


@pytest.mark.slow
@pytest.mark.skipif(not corpus("short/vctk_p225_001.wav"), reason="needs ../shared/corpus")
def test_a_request_over_the_bot_interrupts_it_and_is_heard_from_its_first_word(decoder):
    seen, finals = over_the_bot(decoder, CORPUS / "short" / "vctk_p225_001.wav")
    assert "InterruptionFrame" in seen and seen[-1] != "resume", seen
    assert [normalise(f) for f in finals] == [normalise("Please call Stella.")], finals
