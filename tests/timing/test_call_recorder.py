"""call.wav streamed to disk: the same file as the whole call held in memory would give, at
no memory cost, for the live calls and for the replay."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from agent.timing.call_recorder import CallRecorder

RATE = 16000
CHUNK = 320  # 20 ms


def model_of(ops: list[tuple[str, int, np.ndarray | None]]) -> np.ndarray:
    """What the recording must hold: each channel placed by position, a cut silences the bot
    channel from there on, and the file ends at the last sample either channel kept."""
    user, bot = np.zeros(1 << 20, np.int16), np.zeros(1 << 20, np.int16)
    user_end = bot_end = 0
    for op, pos, samples in ops:
        if op == "cut":
            bot[pos:] = 0
            bot_end = min(bot_end, pos)
            continue
        assert samples is not None
        track = user if op == "user" else bot
        track[pos : pos + len(samples)] = samples
        if op == "user":
            user_end = max(user_end, pos + len(samples))
        else:
            bot_end = max(bot_end, pos + len(samples))
    n = max(user_end, bot_end)
    return np.stack([user[:n], bot[:n]], axis=1)


def random_ops(seed: int) -> list[tuple[str, int, np.ndarray | None]]:
    """Writes as a call makes them: mostly in order, some re-synced back or ahead (jitter,
    bursts), bot audio with gaps, and barge-in cuts."""
    rng = np.random.default_rng(seed)
    ops: list[tuple[str, int, np.ndarray | None]] = []
    user_pos = bot_pos = 0
    for _ in range(400):
        kind = rng.choice(["user", "user", "bot", "bot", "cut", "jump"])
        if kind == "jump":
            user_pos = max(0, user_pos + int(rng.integers(-3000, 3000)))
        elif kind == "cut":
            ops.append(("cut", max(0, bot_pos - int(rng.integers(0, 2000))), None))
        else:
            samples = rng.integers(-32768, 32767, CHUNK * int(rng.integers(1, 4)), dtype=np.int16)
            if kind == "user":
                ops.append(("user", user_pos, samples))
                user_pos += len(samples)
            else:
                bot_pos = max(bot_pos, user_pos - 1000) + int(rng.integers(0, 500))
                ops.append(("bot", bot_pos, samples))
                bot_pos += len(samples)
    return ops


def play(recorder: CallRecorder, ops: list[tuple[str, int, np.ndarray | None]]) -> None:
    for op, pos, samples in ops:
        if op == "cut":
            recorder.cut_bot(pos)
        elif op == "user":
            recorder.write_user(pos, samples.tobytes())
        else:
            recorder.write_bot(pos, samples.tobytes())


@pytest.mark.parametrize("streamed", [True, False], ids=["live call file", "replay temp file"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_file_holds_every_write_at_its_place(tmp_path: Path, seed: int, streamed: bool):
    ops = random_ops(seed)
    part = tmp_path / "call.wav.part"
    recorder = CallRecorder(RATE, part) if streamed else CallRecorder(RATE)
    play(recorder, ops)
    recorder.save(tmp_path / "call.wav")
    audio, rate = sf.read(tmp_path / "call.wav", dtype="int16", always_2d=True)
    assert rate == RATE and audio.shape[1] == 2
    assert np.array_equal(audio, model_of(ops))
    assert not part.exists()


def test_an_empty_call_writes_an_empty_file(tmp_path: Path):
    CallRecorder(RATE, tmp_path / "call.wav.part").save(tmp_path / "call.wav")
    audio, _ = sf.read(tmp_path / "call.wav", dtype="int16", always_2d=True)
    assert audio.shape == (0, 2)


def test_ten_minutes_of_call_cost_no_memory(tmp_path: Path):
    """The audio goes to the file as it comes: 10 minutes (37 MiB as samples) leave the
    Python heap within a few hundred KiB, and the file on disk grows with the call."""
    part = tmp_path / "call.wav.part"
    recorder = CallRecorder(RATE, part)
    chunk = (np.arange(CHUNK, dtype=np.int16) * 50).tobytes()
    tracemalloc.start()
    try:
        for i in range(10 * 60 * 50):
            recorder.write_user(i * CHUNK, chunk)
            recorder.write_bot(i * CHUNK, chunk)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    frames = 10 * 60 * RATE
    assert part.stat().st_size == 44 + frames * 4
    assert peak < 512 * 1024, f"{peak / 1024:.0f} KiB held while recording"
    recorder.save(tmp_path / "call.wav")
    assert sf.info(tmp_path / "call.wav").frames == frames


def test_a_folder_taken_already_is_not_written_through(tmp_path: Path):
    part = tmp_path / "call.wav.part"
    part.write_bytes(b"someone else's")
    with pytest.raises(FileExistsError):
        CallRecorder(RATE, part)


@pytest.mark.parametrize("streamed", [True, False])
def test_the_recording_is_the_owners_alone(tmp_path: Path, streamed: bool):
    """A call's recording was written 0644: any local user could listen to the caller."""
    recorder = CallRecorder(RATE, tmp_path / "call.wav.part" if streamed else None)
    recorder.write_user(0, np.ones(CHUNK, np.int16).tobytes())
    recorder.save(tmp_path / "call.wav")
    assert (tmp_path / "call.wav").stat().st_mode & 0o777 == 0o600
