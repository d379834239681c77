"""The replay's per-turn table and verdict, as a first-time user reads them in a 100-column
terminal: nothing wraps past the edge, the abbreviations are explained, stages over budget
say by how much."""

from __future__ import annotations

import io
from pathlib import Path

from rich.cells import cell_len
from rich.console import Console

from agent.reports.turn_table import SHORT_NAMES, turn_table
from agent.timing.budget import Budget
from agent.timing.record import TurnRecord
from agent.timing.summary import summarize, verdict_lines
from agent.timing.timeline import REPORT_ORDER
from agent.timing.turn_timer import Turn

BUDGET = Budget(
    name="cpu",
    stages={
        "voice_to_voice": {"p50": 500, "p95": 800},
        "endpointing": {"p50": 250, "p95": 400},
        "llm_ttft": {"p50": 80, "p95": 150},
        "tts_ttfb": {"p50": 80, "p95": 120},
    },
)
LONG_USER = (
    "And so, my fellow Americans: ask not what your country can do for you, ask what you "
    "can do for your country. My fellow citizens of the world: ask not what America will do "
    "for you, but what together we can do for the freedom of man."
)
LONG_BOT = "That is a famous line from an inaugural address, " * 4


def records() -> list[TurnRecord]:
    """Twelve turns with long words and slow stages: the demo's shape on a loaded CPU."""
    out = []
    for number in range(1, 13):
        turn = Turn(number, f"clip{number}.wav", LONG_USER, LONG_BOT, LONG_BOT)
        e = turn.events
        e["speech_start"], e["speech_end"] = 1000.0 * number, 1000.0 * number + 4000
        e["turn_end"] = e["speech_end"] + 650 + number  # endpointing over: p50 250
        e["stt_final"] = e["turn_end"] - 30
        e["llm_request"] = e["turn_end"] + 3
        e["llm_first_token"] = e["llm_request"] + (60 if number % 2 else 1234.5)
        e["first_phrase"] = e["llm_first_token"] + 25
        e["tts_first_audio"] = e["first_phrase"] + 70
        e["first_audio_out"] = e["tts_first_audio"] + 5
        if number == 12:
            e["first_audio_out"] = None  # an unanswered turn: dashes, not a crash
        out.append(turn.record(BUDGET))
    return out


def render(renderable: object, width: int) -> list[str]:
    buffer = io.StringIO()
    Console(file=buffer, width=width, color_system=None).print(renderable)
    return buffer.getvalue().splitlines()


def test_the_table_fits_100_columns_and_explains_its_abbreviations():
    lines = render(turn_table(records(), "Turns (runs/demo)"), 100)
    assert max(cell_len(line) for line in lines) <= 100
    heading = next(line for line in lines if "v2v" in line)
    assert heading.split()[-len(REPORT_ORDER) - 1 :] == [
        *(SHORT_NAMES[n] for n in REPORT_ORDER),
        "budget",
    ]
    text = " ".join(" ".join(lines).split())
    for name in REPORT_ORDER:  # the legend names every stage behind its abbreviation
        assert f"{SHORT_NAMES[name]} = {name}" in text
    assert "--wide" in text
    # each turn: the caller's words cut to one line, the bot's under them, both with an ellipsis
    row = next(i for i, line in enumerate(lines) if line.lstrip().startswith("1 "))
    assert "And so, my fellow Americans" in lines[row] and lines[row].rstrip().endswith("over")
    assert "…" in lines[row] and lines[row + 1].lstrip().startswith("→ That is a famous")
    assert "…" in lines[row + 1]
    # values over the per-turn limit are marked; an unanswered turn shows dashes
    assert "1234!" in lines[row + 2] and "651!" in lines[row]
    assert "–" in next(line for line in lines if line.lstrip().startswith("12 "))


def test_wide_prints_every_word_and_full_stage_names():
    lines = render(turn_table(records(), "Turns (runs/demo)", wide=True), 1000)
    text = "\n".join(lines)
    assert LONG_USER in text and LONG_BOT.strip() in text
    assert all(name in text for name in REPORT_ORDER)
    assert "…" not in text and "--wide" not in text


def test_the_verdict_says_which_stages_went_over_and_by_how_much():
    summary = summarize(records(), BUDGET)
    lines = verdict_lines(summary, Path("runs/demo"))
    assert lines[0].startswith("voice-to-voice p50 ")
    assert lines[0].endswith("answered turns; budget 'cpu': fail")
    endp = BUDGET.check({"endpointing": [r.stages["endpointing"] for r in records()]})
    assert endp == ["endpointing p50 656 ms, budget 250 ms: 406 ms over (p95 661 ms: 261 ms over)"]
    # one line per stage over, in the budget's order; tts_ttfb (70 ms) is within its limits
    over = [line.removeprefix("over budget: ") for line in lines if line.startswith("over ")]
    assert [line.split()[0] for line in over] == ["voice_to_voice", "endpointing", "llm_ttft"]
    assert over[1] == endp[0]
    assert over[2].startswith("llm_ttft p50 647 ms, budget 80 ms: 567 ms over (p95 ")
    assert (
        lines[-1] == "each turn, charted: `voice-agent report runs/demo` writes report.html there"
    )
    assert all(cell_len(line) <= 100 for line in lines)


def test_a_run_within_budget_has_no_over_lines():
    loose = Budget(name="loose", stages={"voice_to_voice": {"p95": 60000}})
    lines = verdict_lines(summarize(records(), loose))
    assert lines[0].endswith("budget 'loose': pass")
    assert len(lines) == 1
