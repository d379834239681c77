"""Replay transport: recorded turns in, paced by the call clock, bot audio out as a speaker would
play it.

Input: each file is one user turn, pushed in 20 ms frames on the call clock: the wall clock
(real-time pace), or the audio clock of ``ComputeClock`` (compute pace: each frame goes in once
the work the audio so far started has finished, so the result does not depend on the CPU).
While it waits
for the bot to answer it keeps pushing silence, like a caller holding the line, and plays the
next file once the bot has finished (or said it will not answer). The speech bounds of each
file are found offline, so ``speech_start``/``speech_end`` are exact.

Output: ``PacedOutput``, a simulated sound card.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import numpy as np
from pipecat.frames.frames import (
    BotStartedSpeakingFrame,
    BotStoppedSpeakingFrame,
    EndFrame,
    EndWorkerFrame,
    Frame,
    InputAudioRawFrame,
    StartFrame,
    UserStartedSpeakingFrame,
    UserStoppedSpeakingFrame,
)
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor

from agent.audio import speech_bounds
from agent.clock import CallClock
from agent.frames import ClipStartedFrame, NoReplyFrame, TimelineEventFrame
from agent.timing.call_recorder import CallRecorder
from agent.transports.pacing import FRAME_MS


@dataclass
class ReplayTurn:
    """One recorded user turn, already at the pipeline rate."""

    name: str
    samples: np.ndarray


@dataclass
class PlayedClip:
    """Where one input file lay on the call clock (ms): for tools that grade turn-taking."""

    name: str
    start_ms: float
    end_ms: float
    speech_start_ms: float | None = None
    speech_end_ms: float | None = None


class ReplayInput(FrameProcessor):
    """Pushes the recorded turns into the pipeline at real-time pace, one turn at a time."""

    def __init__(
        self,
        turns: list[ReplayTurn],
        clock: CallClock,
        recorder: CallRecorder,
        *,
        rate: int,
        answer_timeout_secs: float = 30.0,
        settle_secs: float = 0.5,
        after_greeting: bool = False,
    ) -> None:
        """``after_greeting``: the bot speaks first; the first turn waits until it is done."""
        super().__init__()
        self._turns = turns
        self._after_greeting = after_greeting
        self._clock = clock
        self._recorder = recorder
        self._rate = rate
        self._answer_timeout = answer_timeout_secs
        self._settle_secs = settle_secs
        self._frame_samples = rate * FRAME_MS // 1000
        # What the line is waiting for (from the frames coming back upstream): a turn the
        # detector has not ended, an ended turn not yet answered, a bot still talking.
        self._turn_open = self._answer_pending = self._bot_speaking = False
        self._task: asyncio.Task | None = None
        self._next_ms = 0.0  # when the next frame is due, on the call clock
        self.played: list[PlayedClip] = []

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, StartFrame):
            self._clock.start()
            await self.push_frame(frame, direction)
            self._task = self.create_task(self._play_all())
            return
        if isinstance(frame, UserStartedSpeakingFrame):
            self._turn_open = True
        elif isinstance(frame, UserStoppedSpeakingFrame):
            self._turn_open, self._answer_pending = False, True
        elif isinstance(frame, BotStartedSpeakingFrame):
            self._bot_speaking = True
        elif isinstance(frame, BotStoppedSpeakingFrame | NoReplyFrame):
            self._bot_speaking = self._answer_pending = False
        if isinstance(frame, EndFrame) and self._task:
            await self.cancel_task(self._task)
        if not isinstance(frame, NoReplyFrame):
            await self.push_frame(frame, direction)

    async def _push_chunk(self, chunk: np.ndarray) -> float:
        """Push one frame when its time comes; returns the call time it was pushed at."""
        await self._clock.wait_until(self._next_ms)
        at_ms = self._clock.now_ms()
        self._next_ms = max(self._next_ms, at_ms) + FRAME_MS
        pcm = chunk.tobytes()
        self._recorder.write_user(self._recorder.position(at_ms), pcm)
        await self.push_frame(InputAudioRawFrame(audio=pcm, sample_rate=self._rate, num_channels=1))
        return at_ms

    async def _push_silence(self, seconds: float) -> None:
        silence = np.zeros(self._frame_samples, dtype=np.int16)
        for _ in range(int(seconds * 1000 / FRAME_MS)):
            await self._push_chunk(silence)

    async def _play_turn(self, turn: ReplayTurn) -> None:
        bounds = speech_bounds(turn.samples, self._rate)
        n = self._frame_samples
        padded = np.concatenate([turn.samples, np.zeros((-len(turn.samples)) % n, dtype=np.int16)])
        clip = PlayedClip(turn.name, self._clock.now_ms(), self._clock.now_ms())
        self.played.append(clip)
        await self.push_frame(ClipStartedFrame(clip=turn.name, at_ms=clip.start_ms))
        for start in range(0, len(padded), n):
            at_ms = await self._push_chunk(padded[start : start + n])
            clip.end_ms = at_ms + FRAME_MS
            if bounds is None:
                continue
            for event, sample in (("speech_start", bounds[0]), ("speech_end", bounds[1])):
                if start <= sample < start + n or (event == "speech_end" and sample == start + n):
                    offset_ms = (sample - start) * 1000 / self._rate
                    event_ms = round(at_ms + offset_ms, 1)
                    setattr(clip, f"{event}_ms", event_ms)
                    await self.push_frame(TimelineEventFrame(event=event, at_ms=event_ms))

    async def _wait_for_answer(self) -> None:
        """Keep the line open (silence) until every turn the clip opened has ended and been
        answered (or said it will not be), or the timeout passes."""
        deadline = self._clock.now_ms() + self._answer_timeout * 1000
        while self._clock.now_ms() < deadline and (
            self._turn_open or self._answer_pending or self._bot_speaking
        ):
            await self._push_silence(FRAME_MS / 1000)
        await self._push_silence(self._settle_secs)

    async def _play_all(self) -> None:
        self._next_ms = self._clock.now_ms()
        await self._push_silence(self._settle_secs)
        if self._after_greeting:
            await self._wait_for_answer()
        for turn in self._turns:
            await self._play_turn(turn)
            await self._wait_for_answer()
        await self.push_frame(EndWorkerFrame(), FrameDirection.UPSTREAM)
