"""Streaming speech recognition on faster-whisper / CTranslate2.

While the caller speaks, a pass runs over the growing utterance every ``interim_interval_ms``
of new speech, on one worker thread; a pass is skipped, never queued, while another runs.
Each pass gives an ``InterimTranscriptionFrame`` whose confirmed prefix is the words two
consecutive passes agree on (LocalAgreement-2). When the VAD hears silence the final pass
starts at once (speculatively; its text also goes upstream to the turn detector); at
``turn_end`` its result is emitted if no speech came after it, otherwise a fresh pass runs.
Audio before the VAD start is kept (pre-roll) so no first word is lost. Turns longer than
the 30 s Whisper window are committed segment by segment and their audio trimmed.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

import numpy as np
from loguru import logger
from pipecat.frames.frames import (
    Frame,
    InputAudioRawFrame,
    InterimTranscriptionFrame,
    TranscriptionFrame,
    UserStartedSpeakingFrame,
    UserStoppedSpeakingFrame,
    VADUserStartedSpeakingFrame,
)
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor

from agent.audio import RecentAudio
from agent.clock import CallClock
from agent.frames import (
    PauseTranscriptFrame,
    SpeculativeTranscriptFrame,
    SpeechPausedFrame,
    TimelineEventFrame,
)
from agent.recognition.whisper_decoder import RATE, Pass, WhisperDecoder
from agent.settings import ASRSettings

COMMIT_AFTER_SECS = 20.0


class _Speculation:
    """A final pass started at a pause; dropped as soon as speech resumes."""

    def __init__(self, future: asyncio.Future, clock: CallClock) -> None:
        self.future = future
        self.ready_ms: float | None = None
        future.add_done_callback(lambda _: setattr(self, "ready_ms", clock.now_ms()))


def agreed_prefix(a: str, b: str) -> str:
    """The words two hypotheses agree on from the start (LocalAgreement)."""
    out = []
    for x, y in zip(a.split(), b.split(), strict=False):
        if x.strip(".,?!").lower() != y.strip(".,?!").lower():
            break
        out.append(y)
    return " ".join(out)


class StreamingWhisperSTT(FrameProcessor):
    """Interim transcripts while the caller speaks; the final one right at the end of turn."""

    def __init__(
        self, decoder: WhisperDecoder, settings: ASRSettings, clock: CallClock, *, rate: int
    ) -> None:
        super().__init__()
        if rate != RATE:
            raise ValueError(f"recognition runs at {RATE} Hz; the pipeline gives {rate} Hz")
        self._decoder = decoder
        self._settings = settings
        self._clock = clock
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="whisper")
        self._pre_roll = RecentAudio(RATE, settings.pre_roll_ms)
        self._audio = bytearray()
        self._committed = ""
        self._in_turn = False
        self._since_pass = 0
        self._busy = False
        self._last_hypothesis = ""
        self._speculation: _Speculation | None = None

    # -- frames -----------------------------------------------------------------------------

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        await self.push_frame(frame, direction)
        if direction != FrameDirection.DOWNSTREAM:
            return
        if isinstance(frame, InputAudioRawFrame):
            await self._on_audio(frame.audio)
        elif isinstance(frame, UserStartedSpeakingFrame):
            self._start_turn()
        elif isinstance(frame, VADUserStartedSpeakingFrame):
            self._speculation = None
        elif isinstance(frame, SpeechPausedFrame) and self._in_turn:
            self._speculation = _Speculation(self._run_pass(), self._clock)
            self.create_task(self._report_pause_transcript(self._speculation))
        elif isinstance(frame, UserStoppedSpeakingFrame) and self._in_turn:
            await self._finish_turn()

    def _start_turn(self) -> None:
        self._in_turn = True
        self._audio = self._pre_roll.snapshot()
        self._committed = ""
        self._since_pass = 0
        self._last_hypothesis = ""
        self._speculation = None

    async def _on_audio(self, pcm: bytes) -> None:
        self._pre_roll.add(pcm)
        if not self._in_turn:
            return
        self._audio += pcm
        self._since_pass += len(pcm) // 2
        due = self._since_pass >= self._settings.interim_interval_ms * RATE // 1000
        if due and not self._busy and self._speculation is None:
            self._since_pass = 0
            self.create_task(self._interim_pass())

    # -- passes -----------------------------------------------------------------------------

    def _run_pass(self) -> asyncio.Future:
        audio = np.frombuffer(bytes(self._audio), dtype=np.int16).astype(np.float32) / 32768.0
        loop = asyncio.get_running_loop()
        return loop.run_in_executor(self._executor, self._decoder.transcribe, audio)

    async def _interim_pass(self) -> None:
        self._busy = True
        try:
            result: Pass = await self._run_pass()
        finally:
            self._busy = False
        if not self._in_turn:
            return
        self._maybe_commit(result)
        confirmed = agreed_prefix(self._last_hypothesis, result.text)
        self._last_hypothesis = result.text
        text = " ".join(x for x in (self._committed, result.text) if x)
        if text:
            await self.push_frame(
                InterimTranscriptionFrame(
                    text=text,
                    user_id="caller",
                    timestamp=_iso_now(),
                    result={"confirmed": " ".join(x for x in (self._committed, confirmed) if x)},
                )
            )

    async def _report_pause_transcript(self, spec: _Speculation) -> None:
        result: Pass = await spec.future
        if spec is self._speculation:
            text = " ".join(x for x in (self._committed, result.text) if x)
            await self.push_frame(PauseTranscriptFrame(text=text), FrameDirection.UPSTREAM)
            await self.push_frame(SpeculativeTranscriptFrame(text=text))

    def _maybe_commit(self, result: Pass) -> None:
        """Keep long turns inside the Whisper window: commit all but the last segment."""
        if result.audio_secs < COMMIT_AFTER_SECS or len(result.segments) < 2:
            return
        done = result.segments[:-1]
        cut = int(done[-1].end * RATE) * 2
        self._committed = " ".join(
            x for x in (self._committed, "".join(s.text for s in done).strip()) if x
        )
        del self._audio[:cut]
        self._speculation = None
        self._last_hypothesis = ""
        logger.debug(f"{self}: committed {done[-1].end:.2f} s of {result.audio_secs:.2f} s")

    async def _finish_turn(self) -> None:
        self._in_turn = False
        spec, self._speculation = self._speculation, None
        if spec is not None:  # no speech since the pause: the speculative pass is the final one
            result = await spec.future
            ready_ms = spec.ready_ms or self._clock.now_ms()
        else:
            result = await self._run_pass()
            ready_ms = self._clock.now_ms()
        text = " ".join(x for x in (self._committed, result.text) if x).strip()
        logger.debug(f"{self}: final over {result.audio_secs:.2f} s: {result.text!r}")
        await self.push_frame(TimelineEventFrame(event="stt_final", at_ms=ready_ms))
        await self.push_frame(
            TranscriptionFrame(text=text, user_id="caller", timestamp=_iso_now(), finalized=True)
        )

    async def cleanup(self) -> None:
        await super().cleanup()
        self._executor.shutdown(wait=False, cancel_futures=True)


def _iso_now() -> str:
    return datetime.now(UTC).isoformat()
