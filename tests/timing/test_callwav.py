"""The call.wav measurement that benchmarks/turns.py compares pipelines with.

Its agreement with our own turn records on a real replay is checked in
tests/test_replay_e2e.py; here, the recordings it must not misread.
"""

from __future__ import annotations

from pathlib import Path

from agent.audio import load_audio
from agent.timing.callwav import load_thresholds, measure_call
from tests.support.clips import SAMPLES


def test_a_late_push_inside_a_clip_is_not_a_new_turn_and_silence_is_unanswered(
    tmp_path: Path,
) -> None:
    """A gap in the user channel (busy event loop) stays inside its turn; no bot audio: None."""
    import numpy as np
    import soundfile as sf

    rate = 16000
    names = ["ldc93s1.wav", "jfk_part1.wav"]
    clips = [load_audio(SAMPLES / n, rate) for n in names]
    thresholds = load_thresholds(SAMPLES / "manifest.jsonl")
    first = np.concatenate([clips[0][:rate], np.zeros(rate * 3 // 10, np.int16), clips[0][rate:]])
    start1, start2 = rate // 2, rate * 8
    n = start2 + len(clips[1]) + rate
    call = np.zeros((n, 2), np.int16)
    call[start1 : start1 + len(first), 0] = first
    call[start2 : start2 + len(clips[1]), 0] = clips[1]
    speech_end = start1 + int(2.8 * rate) + rate * 3 // 10  # published end, shifted by the gap
    bot_at = speech_end + rate * 4 // 10
    call[bot_at : bot_at + rate, 1] = 1000
    sf.write(tmp_path / "call.wav", call, rate, subtype="PCM_16")

    turns = measure_call(tmp_path / "call.wav", list(zip(names, clips, strict=True)), thresholds)
    assert [t.turn for t in turns] == [1, 2]
    assert turns[0].user_start_ms == 500.0
    assert abs(turns[0].voice_to_voice_ms - 400) <= 60, turns[0]
    assert abs(turns[1].user_start_ms - 8000.0) < 5  # the clip itself opens with a few zeros
    assert turns[1].bot_start_ms is None and turns[1].voice_to_voice_ms is None
