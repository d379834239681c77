"""``voice-agent transcribe``: what the agent hears, for developers debugging recognition.

Without ``--stream`` each file is decoded in one pass (our unpadded short-window decoder;
a file longer than the 30 s Whisper window goes to faster-whisper's own ``transcribe()``,
which walks through any length).
With ``--stream`` the file is played at real-time pace through the same turn detector and
streaming recogniser as a call, and every interim and final transcript is reported with the
time it appeared.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from pipecat.frames.frames import (
    Frame,
    InterimTranscriptionFrame,
    TranscriptionFrame,
    UserStoppedSpeakingFrame,
    VADUserStartedSpeakingFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor

from agent.clock import CallClock
from agent.frames import (
    NoReplyFrame,
    SpeechLullFrame,
    SpeechPausedFrame,
    StageErrorFrame,
    TranscriptRevisionFrame,
    revised_texts,
)
from agent.pipeline import run_pipeline
from agent.recognition.streaming_stt import StreamingWhisperSTT
from agent.recognition.whisper_decoder import MAX_WINDOW_SECS, RATE, WhisperDecoder
from agent.settings import Settings
from agent.timing.call_recorder import CallRecorder
from agent.transports.replay import ReplayInput, ReplayTurn
from agent.turns.detector import TurnDetector
from agent.turns.vad import TurnModels


@dataclass
class TranscriptEvent:
    """One transcript as it appeared: ``kind`` is interim, final or turn_end; also lull (the
    line went quiet while the VAD hears a voice), pause and resume (the VAD heard silence /
    speech again inside the turn), revision (the words of the turns this one goes on from,
    heard again: ``revised``) and error (a stage error)."""

    file: str
    kind: str
    at_ms: float
    text: str = ""
    confirmed: str = ""
    revised: list[tuple[str, str]] = field(default_factory=list)  # (told, now) per turn


def final_texts(events: list[TranscriptEvent]) -> list[str]:
    """Each turn's final transcript, with recognition's revisions (``kind`` revision: the
    words of the turns a later one went on from, heard again) applied."""
    finals: list[str] = []
    for event in events:
        if event.kind == "final":
            finals.append(event.text)
        elif event.kind == "revision":
            finals = revised_texts(finals, event.revised) or finals
    return finals


def transcribe_once(decoder: WhisperDecoder, name: str, samples: np.ndarray) -> TranscriptEvent:
    start = time.perf_counter()
    audio = samples.astype(np.float32) / 32768.0
    if len(audio) <= MAX_WINDOW_SECS * RATE:
        text = decoder.transcribe(audio).text
    else:
        text = decoder.offline(audio)
    took = round((time.perf_counter() - start) * 1000, 1)
    return TranscriptEvent(file=name, kind="final", at_ms=took, text=text)


class TranscriptCollector(FrameProcessor):
    """Records transcripts; after each final one, tells the player no answer is coming."""

    def __init__(self, name: str, clock: CallClock, events: list[TranscriptEvent]) -> None:
        super().__init__()
        self._name, self._clock, self._events = name, clock, events

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        now = self._clock.now_ms()
        if isinstance(frame, SpeechLullFrame):
            self._events.append(TranscriptEvent(self._name, "lull", now))
        elif isinstance(frame, SpeechPausedFrame):
            self._events.append(TranscriptEvent(self._name, "pause", now))
        elif isinstance(frame, VADUserStartedSpeakingFrame):
            self._events.append(TranscriptEvent(self._name, "resume", now))
        elif isinstance(frame, StageErrorFrame):
            self._events.append(TranscriptEvent(self._name, "error", now, frame.error))
        elif isinstance(frame, InterimTranscriptionFrame):
            confirmed = (frame.result or {}).get("confirmed", "")
            self._events.append(TranscriptEvent(self._name, "interim", now, frame.text, confirmed))
        elif isinstance(frame, UserStoppedSpeakingFrame) and direction == FrameDirection.DOWNSTREAM:
            self._events.append(TranscriptEvent(self._name, "turn_end", now))
        elif isinstance(frame, TranscriptRevisionFrame):
            text = " ".join(heard for _, heard in frame.turns)
            self._events.append(TranscriptEvent(self._name, "revision", now, text, "", frame.turns))
        elif isinstance(frame, TranscriptionFrame):
            self._events.append(TranscriptEvent(self._name, "final", now, frame.text))
            await self.push_frame(NoReplyFrame(), FrameDirection.UPSTREAM)
        await self.push_frame(frame, direction)


async def transcribe_stream(
    decoder: WhisperDecoder,
    turn: ReplayTurn | list[ReplayTurn],
    settings: Settings,
    clock: CallClock | None = None,
    after_recognition: Sequence[FrameProcessor] = (),
) -> list[TranscriptEvent]:
    """Play files (one call, one turn each) through turn detection and streaming recognition
    at real-time pace (event times on ``clock``, a new call clock by default);
    ``after_recognition``: processors between recognition and the transcripts' collector."""
    turns = turn if isinstance(turn, list) else [turn]
    clock = clock or CallClock()
    events: list[TranscriptEvent] = []
    pipeline = Pipeline(
        [
            ReplayInput(turns, clock, CallRecorder(RATE), rate=RATE, answer_timeout_secs=5),
            TurnDetector(settings.turn, TurnModels.load(), clock, rate=RATE),
            StreamingWhisperSTT(decoder, settings.asr, clock, rate=RATE),
            *after_recognition,
            TranscriptCollector(" + ".join(t.name for t in turns), clock, events),
        ]
    )
    await run_pipeline(pipeline, rate=RATE)
    return events
