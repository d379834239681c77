"""The call.wav measurement that scripts/bench_turns.py compares pipelines with is itself checked.

It must agree with what our own turn timer reports for the same call, so the stock-vs-ours
comparison (where the stock side has no timer) rests on a tested ruler.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from agent.audio import load_audio
from agent.timing.callwav import load_thresholds, measure_call
from tests.conftest import SAMPLES


def test_call_wav_measurement_agrees_with_turn_records(tmp_path: Path) -> None:
    clip = SAMPLES / "ldc93s1.wav"
    done = subprocess.run(
        [sys.executable, "-m", "agent.cli", "replay", str(clip), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    records = [json.loads(line) for line in (tmp_path / "turns.jsonl").read_text().splitlines()]
    measured = measure_call(
        tmp_path / "call.wav",
        [(clip.name, load_audio(clip, 16000))],
        load_thresholds(SAMPLES / "manifest.jsonl"),
    )
    assert len(measured) == len(records) == 1
    turn, record = measured[0], records[0]
    assert turn.voice_to_voice_ms is not None and not turn.early
    assert abs(turn.voice_to_voice_ms - record["voice_to_voice_ms"]) <= 30, (turn, record)
    assert abs(turn.speech_end_ms - record["events"]["speech_end"]) <= 30, (turn, record)


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
