"""The per-turn table a replay prints: one row per turn, short enough for a 100-column
terminal (texts cut to one line each, stage names abbreviated and explained in a legend
below), or everything in full with ``wide``."""

from __future__ import annotations

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from agent.timing.record import TurnRecord
from agent.timing.summary import ms
from agent.timing.timeline import REPORT_ORDER

# The column heading of each stage in the narrow table.
SHORT_NAMES = {
    "voice_to_voice": "v2v",
    "endpointing": "endp",
    "stt_final": "stt",
    "llm_ttft": "ttft",
    "first_phrase": "phrase",
    "tts_ttfb": "tts",
    "transport_out": "out",
    "retrieval": "kb",
    "tool": "tool",
}

OVER = "!"  # after a value over the budget's per-turn limit


def legend(wide: bool) -> Text:
    """What the headings and marks mean; the narrow table's names are abbreviations."""
    names = "" if wide else ", ".join(f"{SHORT_NAMES[n]} = {n}" for n in REPORT_ORDER) + ". "
    return Text(
        f"Times in ms. {names}voice_to_voice runs from the caller's speech end to the bot's "
        f"first audio; the others are its parts (docs/design.md). {OVER} marks a value over "
        "the budget's per-turn limit (its p95)."
        + ("" if wide else " --wide prints full texts and names."),
        style="dim",
    )


def _stage_cell(record: TurnRecord, name: str) -> Text:
    value = record.stages[name]
    if record.budget.get(name) == "fail":
        return Text(f"{ms(value)}{OVER}", style="red")
    return Text(ms(value), style="bold" if name == "voice_to_voice" else "")


def turn_table(records: list[TurnRecord], title: str, *, wide: bool = False) -> RenderableType:
    """The table and its legend. Narrow: the caller's words over the bot's, each cut to one
    line with an ellipsis; wide: each in its own column, whole, with full stage names."""
    # Narrow, the table fills the width and the texts get what the numbers leave (ratio).
    table = Table(
        title=title,
        box=box.SIMPLE_HEAD,
        padding=(0, 1),
        collapse_padding=True,
        pad_edge=False,
        expand=not wide,
    )
    table.add_column("#", justify="right", no_wrap=True)
    if wide:
        table.add_column("caller said")
        table.add_column("bot answered")
    else:
        table.add_column("caller said / → bot answered", no_wrap=True, overflow="ellipsis", ratio=1)
    for name in REPORT_ORDER:
        table.add_column(name if wide else SHORT_NAMES[name], justify="right", no_wrap=True)
    table.add_column("budget", no_wrap=True)
    for r in records:
        heard, said = r.user_text or "–", r.bot_text or "–"
        texts = [heard, said] if wide else [f"{heard}\n→ {said}"]
        failed = any(v == "fail" for v in r.budget.values())
        verdict = Text("over", style="red") if failed else Text("ok", style="green")
        table.add_row(str(r.turn), *texts, *(_stage_cell(r, n) for n in REPORT_ORDER), verdict)
    return Group(table, legend(wide))
