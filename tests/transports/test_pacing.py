"""Bot audio out at playback pace, as every transport writes it: a barge-in stops the bot
where the listener is, a hold pauses it; timed on the call clock, no model needed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from pipecat.frames.frames import InterruptionFrame, OutputAudioRawFrame
from pipecat.tests.utils import SleepFrame
from pipecat.transports.base_transport import TransportParams

from agent.clock import ComputeClock
from agent.frames import HoldBotAudioFrame, TimelineEventFrame
from agent.timing.call_recorder import CallRecorder
from agent.transports.pacing import PacedOutput
from tests.support.compute_pace import run_paced
from tests.support.fakes import tone

RATE = 16000


def bot_audio(secs: float) -> OutputAudioRawFrame:
    return OutputAudioRawFrame(audio=tone(secs, RATE).tobytes(), sample_rate=RATE, num_channels=1)


def events(frames: list, name: str) -> list[float]:
    return [f.at_ms for f in frames if isinstance(f, TimelineEventFrame) and f.event == name]


def bot_channel(recorder: CallRecorder, path: Path) -> np.ndarray:
    recorder.save(path)
    audio, _ = sf.read(path, dtype="int16")
    return audio[:, 1]


async def test_a_barge_in_stops_the_bot_where_the_listener_is(tmp_path: Path) -> None:
    clock, recorder = ComputeClock(), CallRecorder(RATE)
    frames = [bot_audio(1.0), SleepFrame(sleep=0.3), InterruptionFrame(), SleepFrame(sleep=0.1)]
    down, _ = await run_paced(
        PacedOutput(clock, recorder, rate=RATE), frames_to_send=frames, clock=clock
    )
    # (a starved event loop may write late: the speaker then starts a new stretch)
    first, (cut,) = events(down, "first_audio_out")[0], events(down, "interrupted")
    assert first < cut < first + 1000  # cut while the second of audio was playing
    played = np.flatnonzero(bot_channel(recorder, tmp_path / "call.wav"))
    assert abs(played[-1] / RATE * 1000 - cut) <= 25  # nothing after the cut was kept


async def test_a_hold_pauses_the_bot_and_its_release_resumes_the_answer() -> None:
    clock, recorder = ComputeClock(), CallRecorder(RATE)
    held = [bot_audio(0.6), SleepFrame(sleep=0.2), HoldBotAudioFrame(hold=True), SleepFrame(0.4)]
    released = [HoldBotAudioFrame(hold=False), SleepFrame(sleep=0.8)]
    down, _ = await run_paced(
        PacedOutput(clock, recorder, rate=RATE), frames_to_send=held + released, clock=clock
    )
    first, end = events(down, "first_audio_out")[0], events(down, "bot_audio_end")[-1]
    assert end - first >= 600 + 300  # all of it played, the hold's pause in between
    assert events(down, "interrupted") == []


async def test_a_barge_in_while_held_plays_nothing_more(tmp_path: Path) -> None:
    """The chunk waiting on the hold belongs to the interrupted answer: not one more sample."""
    clock, recorder = ComputeClock(), CallRecorder(RATE)
    held = [bot_audio(0.6), SleepFrame(sleep=0.2), HoldBotAudioFrame(hold=True), SleepFrame(0.4)]
    frames = [*held, InterruptionFrame(), SleepFrame(sleep=0.3)]
    down, _ = await run_paced(
        PacedOutput(clock, recorder, rate=RATE), frames_to_send=frames, clock=clock
    )
    assert len(events(down, "first_audio_out")) == 1  # no new stretch after the barge-in
    played = np.flatnonzero(bot_channel(recorder, tmp_path / "call.wav"))
    assert played[-1] / RATE * 1000 < events(down, "interrupted")[0] + 25


async def test_an_answer_held_before_it_began_starts_as_a_new_answer_on_release() -> None:
    """A hold before the answer's first audio (the caller made a sound after their turn
    ended) delays its start: released, the answer's first audio is still its first."""
    clock, recorder = ComputeClock(), CallRecorder(RATE)
    frames = [
        HoldBotAudioFrame(hold=True, before_answer=True),
        bot_audio(0.4),
        SleepFrame(sleep=0.3),
        HoldBotAudioFrame(hold=False),
        SleepFrame(sleep=0.6),
    ]
    down, _ = await run_paced(
        PacedOutput(clock, recorder, rate=RATE), frames_to_send=frames, clock=clock
    )
    (first,) = events(down, "first_audio_out")
    assert first >= 300  # nothing played while held
    assert events(down, "interrupted") == []


async def test_an_answer_held_before_it_began_is_dropped_unheard_by_the_caller_s_turn(
    tmp_path: Path,
) -> None:
    """The caller went on: their new turn's interruption drops the held answer; nothing of it
    played, so no "interrupted" event (there was no bot audio to stop)."""
    clock, recorder = ComputeClock(), CallRecorder(RATE)
    frames = [
        HoldBotAudioFrame(hold=True, before_answer=True),
        bot_audio(0.4),
        SleepFrame(sleep=0.3),
        InterruptionFrame(),
        SleepFrame(sleep=0.3),
    ]
    down, _ = await run_paced(
        PacedOutput(clock, recorder, rate=RATE), frames_to_send=frames, clock=clock
    )
    assert events(down, "first_audio_out") == events(down, "interrupted") == []
    assert not np.any(bot_channel(recorder, tmp_path / "call.wav"))


@pytest.fixture
def no_time_to_write() -> Iterator[None]:
    """Pipecat's write timeout at 0 s: any write that has to wait at all times out."""
    field = TransportParams.model_fields["audio_out_write_timeout_secs"]
    saved, field.default = field.default, 0.0
    TransportParams.model_rebuild(force=True)
    yield
    field.default = saved
    TransportParams.model_rebuild(force=True)


async def test_no_wall_clock_limit_on_a_write(no_time_to_write: None) -> None:
    """A write waits on the pacing's own clock (a hold, the simulated device, a compute step
    on a loaded machine): pipecat's write timeout, which takes a slow write for a peer that
    stopped reading and drops all later audio, must not apply to it."""
    clock, recorder = ComputeClock(), CallRecorder(RATE)
    held = [bot_audio(0.6), SleepFrame(sleep=0.2), HoldBotAudioFrame(hold=True), SleepFrame(0.4)]
    released = [HoldBotAudioFrame(hold=False), SleepFrame(sleep=0.8)]
    down, _ = await run_paced(
        PacedOutput(clock, recorder, rate=RATE), frames_to_send=held + released, clock=clock
    )
    assert events(down, "bot_audio_end")[-1] - events(down, "first_audio_out")[0] >= 900
