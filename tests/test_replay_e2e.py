"""The replay command end to end: real speech, real models, at compute pace (what it hears,
when turns end and what it answers do not depend on the CPU; latency is for benchmarks)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import soxr

from agent.audio import load_audio
from agent.timing.callwav import load_thresholds, measure_call
from agent.timing.timeline import EVENTS, PART_STAGES, STAGE_NAMES
from tests.support.clips import SAMPLES
from tests.support.transcripts import wer

pytestmark = pytest.mark.slow

CLIPS = ["new_home_in_the_stars.wav", "ldc93s1.wav"]


def as_flac_44k_stereo(wav: Path, out_dir: Path) -> Path:
    """The clip as a 44.1 kHz stereo FLAC: replay must take any common format and rate."""
    audio, rate = sf.read(wav, dtype="float32")
    resampled = soxr.resample(audio, rate, 44100)
    path = out_dir / (wav.stem + ".flac")
    sf.write(path, np.stack([resampled, resampled * 0.5], axis=1), 44100)
    return path


def voice_agent(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "agent.cli", *args], capture_output=True, text=True, timeout=600
    )


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    out = tmp_path_factory.mktemp("replay")
    first = as_flac_44k_stereo(SAMPLES / CLIPS[0], out)
    done = voice_agent(
        "replay", str(first), str(SAMPLES / CLIPS[1]), "--out", str(out), "--pace", "compute"
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return out, done


def test_compute_pace_replays_the_same_call_twice(run, tmp_path):
    out, _ = run
    again = voice_agent(
        "replay", str(out / (Path(CLIPS[0]).stem + ".flac")), str(SAMPLES / CLIPS[1]),
        "--out", str(tmp_path), "--pace", "compute",
    )  # fmt: skip
    assert again.returncode == 0, again.stderr[-3000:]
    first, second = records(out), records(tmp_path)
    for a, b in zip(first, second, strict=True):
        assert (a["user_text"], a["bot_text"]) == (b["user_text"], b["bot_text"])
        assert a["events"] == b["events"]  # the same timeline, to the frame


def records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "turns.jsonl").read_text().splitlines()]


def test_turn_records_follow_the_replay_contract(run, manifest):
    out, done = run
    turns = records(out)
    assert [t["turn"] for t in turns] == [1, 2]
    for turn, clip in zip(turns, CLIPS, strict=True):
        assert Path(turn["input"]).stem == Path(clip).stem
        assert set(turn["events"]) == set(EVENTS)
        assert set(turn["stages"]) == set(STAGE_NAMES)
        assert wer(manifest[clip]["text"], turn["user_text"]) <= 0.25, turn["user_text"]
        assert len(turn["bot_text"].split()) >= 2
        assert turn["voice_to_voice_ms"] == turn["stages"]["voice_to_voice"] > 0
        parts = [turn["stages"][n] for n in PART_STAGES]
        assert round(sum(parts) + sum(turn["gaps"].values()), 1) == turn["voice_to_voice_ms"]
        assert set(turn["budget"]) <= set(STAGE_NAMES)
        assert turn["interrupted"] is False
        assert turn["llm"]["completion_tokens"] > 0
    assert "voice-to-voice p50" in done.stdout


def test_answers_start_speculatively_at_the_pause(run):
    """Clean single-sentence turns: the LLM is asked on the pause transcript, before turn_end."""
    turns = records(run[0])
    hits = [t for t in turns if t["llm"]["speculative"]]
    assert hits, [t["llm"] for t in turns]
    for turn in hits:
        assert turn["events"]["llm_request"] < turn["events"]["turn_end"]
        assert turn["gaps"]["stt_to_llm"] < 0
        # (at compute pace the answer is ready the moment the turn ends)
        assert turn["events"]["first_audio_out"] >= turn["events"]["turn_end"]


def test_summary_has_percentiles_and_a_verdict(run):
    out, _ = run
    summary = json.loads((out / "summary.json").read_text())
    assert summary["turns"] == 2 and summary["answered_turns"] == 2
    v2v = summary["stages"]["voice_to_voice"]
    assert v2v["n"] == 2 and v2v["p50"] <= v2v["p95"] <= v2v["max"]
    assert summary["verdict"] in ("pass", "fail")
    assert summary["budget"]["stages"]["voice_to_voice"]["p95"] == 800


def test_call_wav_shows_the_reported_voice_to_voice(run):
    """From call.wav alone: user speech end (channel 0) -> first bot sample (channel 1).

    ``measure_call`` finds each turn in the recording itself and the user's speech end with
    each clip's published energy thresholds (agent/samples/README.md), independently of the
    agent's own events; the bench against stock Pipecat measures both pipelines this way.
    """
    out, _ = run
    info = sf.info(out / "call.wav")
    assert (info.samplerate, info.channels, info.subtype) == (16000, 2, "PCM_16")
    bot = sf.read(out / "call.wav", dtype="int16")[0][:, 1]
    assert np.abs(bot).max() > 1000  # the bot really spoke
    turns = records(out)
    clips = [(Path(t["input"]).stem + ".wav", load_audio(Path(t["input"]), 16000)) for t in turns]
    measured = measure_call(out / "call.wav", clips, load_thresholds(SAMPLES / "manifest.jsonl"))
    assert len(measured) == len(turns)
    for seen, turn in zip(measured, turns, strict=True):
        assert seen.voice_to_voice_ms is not None and not seen.early, (seen, turn)
        assert abs(seen.voice_to_voice_ms - turn["voice_to_voice_ms"]) <= 30, (seen, turn)
        assert abs(seen.speech_end_ms - turn["events"]["speech_end"]) <= 30, (seen, turn)


def test_check_exits_1_when_the_budget_is_violated(run, tmp_path):
    tight = tmp_path / "tight.yaml"
    tight.write_text("profiles: {cpu: {voice_to_voice: {p50: 1, p95: 2}}}\n")
    done = voice_agent(
        "replay", str(SAMPLES / "ldc93s1.wav"), "--out", str(tmp_path / "o"),
        "--check", "--budget", str(tight), "--pace", "compute",
    )  # fmt: skip
    assert done.returncode == 1, done.stderr[-2000:]
    assert "over budget: voice_to_voice p50" in done.stdout


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("nope.wav", None, "does not exist"),
        ("empty.wav", b"", "not a readable audio"),
        ("text.wav", b"hello, not audio", "not a readable audio"),
        ("", None, "is not a file"),
    ],
)
def test_bad_inputs_exit_2_with_one_line(tmp_path, name, content, message):
    path = tmp_path / name
    if content is not None:
        path.write_bytes(content)
    done = voice_agent("replay", str(path), "--out", str(tmp_path / "o"))
    assert done.returncode == 2
    assert message in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_zero_samples_wav_is_refused(tmp_path):
    empty = tmp_path / "silent.wav"
    sf.write(empty, np.zeros(0, dtype=np.int16), 16000)
    done = voice_agent("replay", str(empty), "--out", str(tmp_path / "o"))
    assert done.returncode == 2 and "has no audio samples" in done.stderr
