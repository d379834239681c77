"""QA reports of a run folder: Markdown, HTML (rendered in Chromium), JSON, gates, comparison.

Each test runs on a scripted run (the record contract written from scripted timings: no
model, milliseconds) and, in the slow tier, on one real replay run. The command line runs
in-process, through the same typer app as ``voice-agent``.
"""

from __future__ import annotations

import base64
import io
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from typer.testing import CliRunner

from agent.cli.main import app
from agent.reports.clips import Clip, turn_clips
from agent.reports.load import load_run, load_runs
from agent.timing.budget import default_budget_file, load_budget
from agent.timing.record import TurnRecord, jsonl
from agent.timing.summary import ms, stage_values, summarize
from agent.timing.timeline import PART_STAGES, STAGE_NAMES, stages_and_gaps
from tests.support.clips import SAMPLES
from tests.support.fakes import scripted_run

CLIPS = ["ldc93s1.wav", "new_home_in_the_stars.wav"]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def voice_agent(*args: str | Path) -> subprocess.CompletedProcess:
    """``voice-agent ARGS`` run in this process: exit status, stdout and stderr apart."""
    argv = [str(a) for a in args]
    result = CliRunner().invoke(app, argv)
    return subprocess.CompletedProcess(argv, result.exit_code, result.stdout, result.stderr)


def records(run: Path) -> list[TurnRecord]:
    return load_run(run)


@pytest.fixture(scope="module", params=["scripted", pytest.param("replay", marks=pytest.mark.slow)])
def run(request: pytest.FixtureRequest, tmp_path_factory) -> Path:
    """A run folder: scripted, or one real replay run (real speech and models, compute pace)."""
    out = tmp_path_factory.mktemp("run")
    if request.param == "scripted":
        return scripted_run(out, load_budget(default_budget_file(), None))
    done = subprocess.run(
        [sys.executable, "-m", "agent.cli", "replay", *(str(SAMPLES / c) for c in CLIPS),
         "--out", str(out), "--pace", "compute"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(records(out)) >= 2
    return out


@pytest.fixture(scope="module")
def reports(run, tmp_path_factory) -> Path:
    """All three report formats of the run, written to a folder of their own."""
    out = tmp_path_factory.mktemp("reports")
    done = voice_agent("report", run, "--out", out)
    assert done.returncode == 0, done.stderr
    assert {p.name for p in out.iterdir()} == {"report.md", "report.html", "report.json"}
    return out


def budget_yaml(path: Path, limits: dict[str, dict[str, float]], name: str = "qa") -> Path:
    lines = ["profiles:", f"  {name}:"]
    lines += [f"    {stage}: {json.dumps(limit)}" for stage, limit in limits.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


# -- the three formats ----------------------------------------------------------------------


def test_json_report_is_the_pooled_summary_of_the_run(run, reports):
    report = json.loads((reports / "report.json").read_text())
    turns = records(run)
    # same numbers as the replay's own summary (same percentiles, same default budget)
    replay_summary = json.loads((run / "summary.json").read_text())
    assert report["stages"] == replay_summary["stages"]
    assert report["violations"] == replay_summary["violations"]
    assert report["turns"] == len(turns) and report["runs"] == [str(run)]
    assert set(report["stage_verdicts"]) == set(STAGE_NAMES)
    slowest = max((t for t in turns if t.voice_to_voice_ms), key=lambda t: t.voice_to_voice_ms)
    assert report["worst_turns"][0]["voice_to_voice_ms"] == slowest.voice_to_voice_ms
    assert report["worst_turns"][0]["user_text"] == slowest.user_text
    assert report["interruptions"] == sum(t.interrupted for t in turns)
    reported = [t.llm for t in turns if t.llm and t.llm.prompt_tokens and
                t.llm.cached_tokens is not None]  # fmt: skip
    if reported:
        ratio = sum(x.cached_tokens or 0 for x in reported) / sum(
            x.prompt_tokens or 0 for x in reported
        )
        assert report["llm_cache"]["ratio"] == round(ratio, 3)
    else:
        assert report["llm_cache"]["ratio"] is None


def test_markdown_report_has_budget_table_worst_turns_cache_and_interruptions(run, reports):
    text = (reports / "report.md").read_text()
    summary = json.loads((run / "summary.json").read_text())
    rows = {
        cells[0]: cells
        for line in text.splitlines()
        if line.startswith("| ") and (cells := [c.strip() for c in line.strip("|").split("|")])
    }
    for name in STAGE_NAMES:
        stats, limit = summary["stages"][name], summary["budget"]["stages"][name]
        # stage | budget p50 | budget p95 | p50 | p95 | max | turns | verdict
        # a stage no turn had (no tool called) shows its limits and no figures
        assert rows[name][1:7] == [
            ms(limit["p50"]), ms(limit["p95"]), ms(stats["p50"]), ms(stats["p95"]),
            ms(stats["max"]), str(stats["n"]),
        ]  # fmt: skip
        failed = any(v.startswith(name + " ") for v in summary["violations"])
        assert ("fail" in rows[name][7]) == failed
    assert "## Worst turns (by voice-to-voice)" in text
    for turn in records(run):
        assert turn.user_text in text and turn.bot_text in text
    assert re.search(r"LLM prompt cache: (not reported|\d+% \(\d+ of \d+ prompt tokens)", text)
    assert re.search(r"Interruptions \(caller barge-in\): \d+ of \d+ turns", text)


def test_html_report_is_self_contained_with_each_turns_audio(run, reports):
    page = (reports / "report.html").read_text()
    turns = records(run)
    assert "<link" not in page and "<script src" not in page and "<img" not in page
    urls = re.findall(r"https?://[^\s\"'<>)]+", page)
    assert set(urls) <= {"http://www.w3.org/2000/svg"}, urls
    assert page.count('data-chart="waterfall"') == len(turns)
    assert 'data-chart="v2v-cdf"' in page and 'data-chart="stage-boxes"' in page
    # the 800 ms budget line of every waterfall
    assert len(re.findall(r'class="budget-line"[^>]*>budget 800 ms<', page)) == len(turns)
    clips = re.findall(
        r'data-start-ms="([0-9.]+)" src="data:audio/wav;base64,([A-Za-z0-9+/=]+)"', page
    )
    assert len(clips) == len(turns)
    call, rate = sf.read(run / "call.wav", dtype="int16")
    for turn, (start_ms, clip) in zip(turns, clips, strict=True):
        audio, clip_rate = sf.read(io.BytesIO(base64.b64decode(clip)), dtype="int16")
        assert clip_rate == rate == 16000 and audio.ndim == 2 and audio.shape[1] == 2
        # a verbatim stretch of call.wav, both channels, covering the user's speech and the answer
        first = round(float(start_ms) * rate / 1000)
        assert np.array_equal(audio, call[first : first + len(audio)])
        events = turn.events
        assert float(start_ms) <= events["speech_start"]
        # (the last turn's clip ends with call.wav, at bot_audio_end to the sample)
        assert float(start_ms) + (len(audio) + 1) / rate * 1000 >= events["bot_audio_end"]
        assert np.abs(audio[:, 0]).max() > 1000, "the caller is audible"
        assert np.abs(audio[:, 1]).max() > 1000, "the bot is audible"


def test_silent_bot_check_reads_call_wav(run):
    """The HTML's call.wav check: real clips pass; the same clip with the answer muted is caught."""
    pool = load_runs([run])
    clips = turn_clips(pool)
    for turn in pool.turns:
        clip, at = clips[turn.label], turn.record.events["first_audio_out"]
        assert not clip.bot_silent_after(at)
        muted = clip.audio.copy()
        muted[round((at - clip.start_ms) * clip.rate / 1000) :, 1] = 0
        assert Clip(muted, clip.rate, clip.start_ms).bot_silent_after(at)


# -- the HTML in a real browser -------------------------------------------------------------


def chromium(*args: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [CHROMIUM, "--headless", "--disable-gpu", "--no-sandbox", "--enable-logging=stderr",
         "--v=0", *map(str, args)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def console_lines(done: subprocess.CompletedProcess) -> list[str]:
    return [line for line in done.stderr.splitlines() if ":CONSOLE" in line]


needs_chromium = pytest.mark.skipif(
    CHROMIUM is None,
    reason="no chromium binary: run scripts/setup.sh as root or `apt-get install chromium`",
)
slow_browser = pytest.mark.slow  # a headless browser takes seconds to start


@needs_chromium
@slow_browser
def test_console_check_catches_a_broken_page(tmp_path):
    """The check below can fail: a page with a script error is caught."""
    page = tmp_path / "broken.html"
    page.write_text("<html><body><script>notDefined();</script></body></html>")
    assert any("notDefined" in line for line in console_lines(chromium("--dump-dom", page)))


@needs_chromium
@slow_browser
def test_html_renders_in_chromium_without_console_errors(run, reports, tmp_path):
    turns = records(run)
    page = reports / "report.html"
    done = chromium("--dump-dom", page)
    assert done.returncode == 0, done.stderr[-2000:]
    assert console_lines(done) == []
    charts = 2 + 2 * len(turns)  # distribution, box plots, and per turn a waterfall + waveform
    # the page's script sets the title after counting the drawn charts
    assert f"[ready: {charts} charts]</title>" in done.stdout
    dom = done.stdout
    assert len(re.findall(r'<svg class="chart"', dom)) == charts
    bars = re.findall(r'<rect class="bar" data-stage="([a-z_]+)"', dom)
    answered = sum(t.voice_to_voice_ms is not None for t in turns)
    assert bars.count("voice_to_voice") == answered and bars.count("llm_ttft") == answered
    assert len(re.findall(r'<circle class="turn-dot"', dom)) == answered
    # a box per stage these turns have: voice-to-voice and its parts (no tool, no retrieval)
    assert len(re.findall(r'<rect class="box"', dom)) >= 1 + len(PART_STAGES)
    shot = tmp_path / "report.png"
    done = chromium(f"--screenshot={shot}", "--window-size=1200,2000", page)
    assert shot.is_file() and shot.stat().st_size > 50_000, done.stderr[-2000:]


# -- the budget gate ------------------------------------------------------------------------


def test_check_passes_on_a_loose_budget(run, tmp_path):
    loose = budget_yaml(
        tmp_path / "loose.yaml", {n: {"p50": 60000, "p95": 60000} for n in STAGE_NAMES}
    )
    done = voice_agent("report", run, "--budget", loose, "--check", "--out", tmp_path, "-f", "json")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "budget 'qa': pass" in done.stdout and "over budget" not in done.stdout


def test_check_fails_on_a_tight_budget_with_one_line_per_stage_over(run, tmp_path):
    tight = budget_yaml(
        tmp_path / "tight.yaml",
        # (at compute pace the LLM's stages take no time: endpointing and voice-to-voice do)
        {"voice_to_voice": {"p50": 1, "p95": 2}, "endpointing": {"p50": 1, "p95": 1}},
    )
    done = voice_agent("report", run, "--budget", tight, "--check", "--out", tmp_path, "-f", "md")
    assert done.returncode == 1, done.stdout + done.stderr
    expected = load_budget(tight, None).check(stage_values(records(run)))
    assert [line.split()[:2] for line in expected] == [
        ["voice_to_voice", "p50"],
        ["endpointing", "p50"],
    ]
    lines = [line for line in done.stdout.splitlines() if line.startswith("over budget: ")]
    assert lines == [f"over budget: {v}" for v in expected]
    assert "❌ fail" in (tmp_path / "report.md").read_text()


def test_profile_flag_picks_the_gpu_limits(run, tmp_path):
    done = voice_agent("report", run, "--profile", "gpu", "--out", tmp_path, "-f", "json")
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    gpu = load_budget(default_budget_file(), "gpu")
    assert report["budget"]["profile"] == "gpu"
    assert report["violations"] == summarize(records(run), gpu)["violations"]
    assert report["budget"]["stages"]["voice_to_voice"] == {"p50": 350, "p95": 500}


def bad_budget(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "bad.yaml"
    path.write_text(body)
    return path


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("missing run", "run folder"),
        ("no turns.jsonl", "turns.jsonl not found"),
        ("malformed line", "line 2 is not valid JSON"),
        ("not a record", "lacks"),
        ("unknown stage", "unknown stage(s) llm_speed"),
        ("bad number", "p95"),
        ("not a number", "p50"),
        ("unknown profile", "no profile 'laptop'"),
        ("bad yaml", "not valid YAML"),
        ("compare typo", "voice-agent compare"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(run, tmp_path, case, message):
    args: list[str | Path] = [run]
    if case == "missing run":
        args = [tmp_path / "nowhere"]
    elif case == "no turns.jsonl":
        args = [tmp_path]
    elif case in ("malformed line", "not a record"):
        broken = tmp_path / "broken"
        shutil.copytree(run, broken)
        lines = (broken / "turns.jsonl").read_text().splitlines()
        lines.insert(1, '{"turn": 2, "events": ' if case == "malformed line" else '{"turn": 9}')
        (broken / "turns.jsonl").write_text("\n".join(lines) + "\n")
        args = [broken]
    elif case == "unknown stage":
        args += ["--budget", bad_budget(tmp_path, "profiles:\n  x:\n    llm_speed: {p50: 5}\n")]
    elif case == "bad number":
        args += [
            "--budget",
            bad_budget(tmp_path, "profiles:\n  x:\n    voice_to_voice: {p95: -5}\n"),
        ]
    elif case == "not a number":
        body = "profiles:\n  x:\n    voice_to_voice: {p50: fast}\n"
        args += ["--budget", bad_budget(tmp_path, body)]
    elif case == "unknown profile":
        args += ["--profile", "laptop"]
    elif case == "bad yaml":
        args += ["--budget", bad_budget(tmp_path, "profiles: [x: {\n")]
    elif case == "compare typo":
        args = ["compare", run, run]
    done = voice_agent("report", *args, "--out", tmp_path / "out")
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert message in lines[0]
    assert "Traceback" not in done.stderr


# -- comparing runs -------------------------------------------------------------------------


def slowed_copy(run: Path, dest: Path, extra_ms: float) -> Path:
    """The same run with the LLM's first token (and all that follows) extra_ms later."""
    shutil.copytree(run, dest)
    later = ("llm_first_token", "first_phrase", "tts_first_audio", "first_audio_out",
             "bot_audio_end")  # fmt: skip
    out = []
    for record in records(run):
        events = {k: v + extra_ms if k in later and v is not None else v
                  for k, v in record.events.items()}  # fmt: skip
        stages, gaps, lead = stages_and_gaps(events)
        out.append(record.model_copy(update=dict(
            events=events, stages=stages, gaps=gaps, stt_lead_ms=lead,
            voice_to_voice_ms=stages["voice_to_voice"],
        )))  # fmt: skip
    (dest / "turns.jsonl").write_text(jsonl(out))
    return dest


def test_compare_passes_on_identical_runs(run):
    done = voice_agent("compare", run, run)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no regression beyond the tolerance" in done.stdout
    assert re.search(r"\| voice_to_voice \| (\d+)/\1 \|.*\| \+0 \| \[\+0, \+0\] \|", done.stdout)


def test_compare_detects_an_injected_300_ms_regression(run, tmp_path):
    slow = slowed_copy(run, tmp_path / "slow", 300.0)
    done = voice_agent("compare", run, slow)
    assert done.returncode == 1, done.stdout + done.stderr
    regressions = [line for line in done.stdout.splitlines() if line.startswith("regression: ")]
    assert any(r.startswith("regression: voice_to_voice p50 +300 ms") for r in regressions)
    assert any(r.startswith("regression: llm_ttft p50 +300 ms") for r in regressions)
    assert not any("endpointing" in r or "tts_ttfb" in r for r in regressions)
    changes = {
        c["stage"]: c for c in json.loads(voice_agent("compare", run, slow, "--json").stdout)
    }
    assert changes["voice_to_voice"]["d50"] == pytest.approx(300.0, abs=0.2)
    lo, hi = changes["voice_to_voice"]["ci_p50"]
    assert 0 < lo <= 300 <= hi  # the interval excludes "no change"
    assert changes["endpointing"]["d50"] == 0 and changes["endpointing"]["regressions"] == []


def test_compare_tolerates_a_change_within_the_tolerance(run, tmp_path):
    slow = slowed_copy(run, tmp_path / "slightly", 20.0)
    done = voice_agent("compare", run, slow, "--tolerance-ms", "50", "--tolerance-pct", "0")
    assert done.returncode == 0, done.stdout + done.stderr
    done = voice_agent("compare", run, slow, "--tolerance-ms", "10", "--tolerance-pct", "0")
    assert done.returncode == 1 and "regression: llm_ttft p50 +20 ms" in done.stdout


def test_several_runs_pool_their_turns(run, tmp_path):
    again = tmp_path / "again"
    shutil.copytree(run, again)
    done = voice_agent("report", run, again, "--out", tmp_path / "out", "-f", "json", "-f", "md")
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    turns = records(run)
    answered = sum(t.voice_to_voice_ms is not None for t in turns)
    assert report["turns"] == 2 * len(turns) and report["answered_turns"] == 2 * answered
    assert report["stages"]["voice_to_voice"]["n"] == 2 * answered
    assert report["runs"] == [str(run), str(again)]
    assert all(re.fullmatch(rf"({run.name}|again):#\d+", w["turn"]) for w in report["worst_turns"])
    assert (tmp_path / "out" / "report.md").is_file()
    assert not (tmp_path / "out" / "report.html").exists()
