"""The Markdown report: the numbers QA pastes into a ticket or a pull request."""

from __future__ import annotations

from typing import Any

from agent.timing.summary import ms
from agent.timing.timeline import REPORT_ORDER

VERDICT_MARK = {"pass": "✅ pass", "fail": "❌ fail", "no budget": "–", "no data": "no data"}


def cell(text: str) -> str:
    """Text that is safe inside a Markdown table cell."""
    return " ".join(str(text).split()).replace("|", "\\|") or "–"


def cache_line(cache: dict[str, Any]) -> str:
    """The LLM prompt-cache ratio, or why there is none."""
    if cache["ratio"] is None:
        return "not reported (the engine gave no prompt/cached token counts)"
    return (
        f"{cache['ratio']:.0%} ({cache['cached_tokens']} of {cache['prompt_tokens']} prompt "
        f"tokens cached, over {cache['turns_reported']} turns)"
    )


def render_markdown(summary: dict[str, Any]) -> str:
    """The whole report from a pooled summary (agent.reports.pooled)."""
    budget = summary["budget"]
    verdict = "**PASS**" if summary["verdict"] == "pass" else "**FAIL**"
    lines = [
        "# Latency report",
        "",
        "Runs: " + ", ".join(f"`{r}`" for r in summary["runs"]),
        "",
        f"{summary['turns']} turns, {summary['answered_turns']} answered; "
        f"budget profile `{budget['profile']}`: {verdict}",
        "",
        "## Budget",
        "",
        "| stage | budget p50 | budget p95 | p50 | p95 | max | turns | verdict |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for name in REPORT_ORDER:
        limit = budget["stages"].get(name, {})
        stats = summary["stages"][name]
        lines.append(
            f"| {name} | {ms(limit.get('p50'))} | {ms(limit.get('p95'))} | {ms(stats['p50'])} "
            f"| {ms(stats['p95'])} | {ms(stats['max'])} | {stats['n']} "
            f"| {VERDICT_MARK[summary['stage_verdicts'][name]]} |"
        )
    for name, stats in summary["gaps"].items():
        lines.append(
            f"| gap {name} | – | – | {ms(stats['p50'])} | {ms(stats['p95'])} "
            f"| {ms(stats['max'])} | {stats['n']} | not budgeted |"
        )
    lines.append("")
    lines.append("All times in ms from the user's speech end.")
    if summary["violations"]:
        lines += ["", "Over budget:", ""] + [f"- {v}" for v in summary["violations"]]
    lines += [
        "",
        "## Worst turns (by voice-to-voice)",
        "",
        "| turn | voice-to-voice ms | slowest stage | user said | bot said |",
        "| --- | ---: | --- | --- | --- |",
    ]
    for turn in summary["worst_turns"]:
        lines.append(
            f"| {turn['turn']} | {ms(turn['voice_to_voice_ms'])} "
            f"| {turn['slowest_stage'] or '–'} | {cell(turn['user_text'])} "
            f"| {cell(turn['bot_text'])} |"
        )
    if summary["unanswered"]:
        lines += ["", "Not answered: " + ", ".join(summary["unanswered"])]
    lines += [
        "",
        "## LLM and interruptions",
        "",
        f"- LLM prompt cache: {cache_line(summary['llm_cache'])}",
        f"- Interruptions (caller barge-in): {summary['interruptions']} "
        f"of {summary['turns']} turns",
    ]
    if summary["errors"]:
        lines += ["", "## Errors", ""]
        lines += [f"- {e['turn']}: {cell(e['error'])}" for e in summary["errors"]]
    return "\n".join(lines) + "\n"
