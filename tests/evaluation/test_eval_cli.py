"""`voice-agent eval` end to end on real corpus speech, at compute pace (same verdict on any
machine): the files it writes, the figures it grades, its gate and its errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.clips import CORPUS

MAIN = CORPUS / "main" / "manifest.jsonl"

pytestmark = pytest.mark.skipif(not MAIN.is_file(), reason="the developer corpus is not here")


def voice_agent(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "agent.cli", *args], capture_output=True, text=True, timeout=900
    )


@pytest.fixture(scope="module")
def manifest(tmp_path_factory) -> Path:
    """Two corpus clips of two speakers, referred to from another folder."""
    rows = [json.loads(x) for x in MAIN.read_text().splitlines()]
    picked = [r for r in rows if r["file"] in ("vctk_p238_165.wav", "vctk_p339_117.wav")]
    path = tmp_path_factory.mktemp("manifest") / "two.jsonl"
    path.write_text(
        "".join(json.dumps({**r, "file": str(MAIN.parent / r["file"])}) + "\n" for r in picked)
    )
    return path


@pytest.fixture(scope="module")
def eval_run(manifest, tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    out = tmp_path_factory.mktemp("eval")
    done = voice_agent("eval", str(manifest), "--out", str(out), "--pace", "compute")
    assert done.returncode == 0, done.stderr[-3000:]
    return out, done


def test_eval_grades_what_was_heard_and_when_the_bot_spoke(eval_run):
    out, done = eval_run
    report = json.loads((out / "eval.json").read_text())
    o = report["overall"]
    assert report["pace"] == "compute" and o["clips"] == 2 and o["reference_words"] > 10
    assert o["wer_offline"] is not None and o["wer_streaming"] <= 0.2
    assert o["turns"] == o["expected_turns"] == 2 and o["splits"] == 0 and o["cutoffs"] == 0
    assert o["duplicated_phrases"] == 0 and o["stray_words"] == 0
    assert o["voice_to_voice_callwav"]["n"] == 2
    assert o["talk_over"]["clips_over_200ms"] == 0 and o["words_lost"] == 0
    assert o["dictation"]["clips"] == 0
    for clip in report["clips"]:
        assert clip["speech_start_ms"] < clip["speech_end_ms"]
        assert clip["voice_to_voice_ms"] > 0 and clip["answers"][0]
        assert clip["ended_by"][0] in ("smart_turn", "smart_turn_and_text", "words", "max_silence")
    assert (out / "call.wav").is_file() and (out / "turns.jsonl").is_file()
    html = (out / "report.html").read_text()
    assert "Eval per clip" in html and "vctk_p238_165.wav" in html
    assert "WER streaming" in done.stdout and "eval verdict" in done.stdout


@pytest.mark.slow
def test_check_exits_1_when_an_eval_limit_breaks(manifest, tmp_path):
    strict = tmp_path / "budget.yaml"
    strict.write_text(
        "profiles: {cpu: {voice_to_voice: {p50: 500, p95: 800}}}\n"
        "eval: {max_wer_gap: -1.0}\n"  # no run can be 100 points better than offline
    )
    done = voice_agent(
        "eval", str(manifest), "--out", str(tmp_path / "o"), "--pace", "compute",
        "--per-clip", "--check", "--budget", str(strict),
    )  # fmt: skip
    assert done.returncode == 1, done.stderr[-2000:]
    assert "over limit: wer_gap" in done.stdout
    report = json.loads((tmp_path / "o" / "eval.json").read_text())
    assert report["per_clip"] and len(list((tmp_path / "o" / "calls").iterdir())) == 2


def test_two_eval_runs_compare(eval_run, tmp_path):
    out, _ = eval_run
    worse = json.loads((out / "eval.json").read_text())
    worse["overall"]["cutoff_rate"] = 0.5
    (tmp_path / "eval.json").write_text(json.dumps(worse))
    for name in ("turns.jsonl", "summary.json"):
        (tmp_path / name).write_text((out / name).read_text())
    done = voice_agent("compare", str(out), str(tmp_path))
    assert done.returncode == 1 and "cut-off rate" in done.stdout and "WORSE" in done.stdout


def test_a_bad_manifest_is_one_line_and_exit_2(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"file": "nowhere.wav", "text": "hello"}\n')
    done = voice_agent("eval", str(bad), "--out", str(tmp_path / "o"))
    assert done.returncode == 2 and "not found" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
