"""Bot audio out at playback pace: the part every output transport shares with a sound card.

Audio written while earlier audio still plays is queued behind it; each write blocks until
the device has room for it, as a real device would, so the bot's speaking state stays true
to what the listener hears and barge-in stops it within a chunk. Writes land on the call
recording's bot channel and mark the turn's output events on the timeline.
"""

from __future__ import annotations

import asyncio
import math

from pipecat.frames.frames import Frame, InterruptionFrame, OutputAudioRawFrame, StartFrame
from pipecat.processors.frame_processor import FrameDirection
from pipecat.transports.base_output import BaseOutputTransport
from pipecat.transports.base_transport import TransportParams

from agent.clock import CallClock
from agent.frames import HoldBotAudioFrame, TimelineEventFrame
from agent.timing.call_recorder import CallRecorder

FRAME_MS = 20


class PacedOutput(BaseOutputTransport):
    """Writes bot audio onto the recording's bot channel as a sound card would play it.

    A ``HoldBotAudioFrame`` stops the writing (what was written still plays out) until it is
    released, which resumes the answer where it stopped (or starts one held before it began),
    or an interruption drops it. Nothing held reaches the listener (``deliver``).
    """

    def __init__(self, clock: CallClock, recorder: CallRecorder, *, rate: int) -> None:
        super().__init__(
            # No end silence: the recording ends with the bot's last real sample. 20 ms
            # chunks (pipecat's default is 40): what is already sent when the caller barges
            # in plays out, so smaller chunks stop the bot sooner. No write timeout: a write
            # waits on this class's own clock (a hold, the simulated device, a compute-paced
            # step on a loaded machine), never on a peer; pipecat's would take a long wait for
            # a peer that stopped reading and drop all later audio (LiveOutput bounds its
            # sends to a real listener itself).
            TransportParams(
                audio_out_enabled=True,
                audio_out_sample_rate=rate,
                audio_out_end_silence_secs=0,
                audio_out_10ms_chunks=2,
                audio_out_write_timeout_secs=math.inf,
            ),  # fmt: skip
        )
        self._clock = clock
        self._recorder = recorder
        self._cursor = 0  # next free sample position on the bot channel
        self._released = asyncio.Event()  # cleared while a barge-in may be starting
        self._released.set()
        self._resuming = False  # the next audio goes on after a hold: not a new first audio
        self._held_mid_answer = False  # the hold stopped an answer (not one yet to start)
        self._interruptions = 0  # a frame held across an interruption belongs to the old answer

    async def start(self, frame: StartFrame) -> None:
        await super().start(frame)
        await self.set_transport_ready(frame)

    async def deliver(self, pcm: bytes) -> bool:
        """Hand one chunk to the listener (a live transport's part); False: they are gone."""
        return True

    async def write_audio_frame(self, frame: OutputAudioRawFrame) -> bool:
        interruptions = self._interruptions
        await self._released.wait()
        if interruptions != self._interruptions:
            return True  # the caller barged in while it was held: it must not play
        if not await self.deliver(frame.audio):
            return False
        now_ms = self._clock.now_ms()
        now = self._recorder.position(now_ms)
        if self._resuming:
            self._resuming = False
            self._cursor = max(self._cursor, now)
        elif self._cursor <= now:
            # The speaker had gone quiet: this is the first audio of a new stretch of speech.
            self._cursor = now
            await self.push_frame(TimelineEventFrame(event="first_audio_out", at_ms=now_ms))
        self._recorder.write_bot(self._cursor, frame.audio)
        self._cursor += len(frame.audio) // 2
        end_ms = self._cursor * 1000 / self.sample_rate
        await self.push_frame(TimelineEventFrame(event="bot_audio_end", at_ms=round(end_ms, 1)))
        # Block while more than one chunk is queued in the device, like a real sound card.
        ahead_secs = (self._cursor - now - len(frame.audio) // 2) / self.sample_rate
        if ahead_secs > 0:
            await self._clock.sleep(ahead_secs)
        return True

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        if isinstance(frame, HoldBotAudioFrame):
            if frame.hold:
                self._released.clear()
                self._held_mid_answer = not frame.before_answer
            elif not self._released.is_set():
                self._resuming = self._held_mid_answer
                self._released.set()
            return
        if isinstance(frame, InterruptionFrame):
            self._interruptions += 1
            now_ms = self._clock.now_ms()
            now = self._recorder.position(now_ms)
            if self._cursor > now:
                self._recorder.cut_bot(now)
                self._cursor = now
                await self.push_frame(TimelineEventFrame(event="interrupted", at_ms=now_ms))
                await self.push_frame(TimelineEventFrame(event="bot_audio_end", at_ms=now_ms))
            elif not self._released.is_set() and self._held_mid_answer:  # stopped at the hold
                stopped_ms = round(self._cursor * 1000 / self.sample_rate, 1)
                await self.push_frame(TimelineEventFrame(event="interrupted", at_ms=stopped_ms))
            self._released.set()
            self._resuming = False
        await super().process_frame(frame, direction)
