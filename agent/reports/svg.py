"""Hand-written SVG charts for the HTML report: no plotting library, no JavaScript needed.

Every chart is a string of inline SVG with ``class="chart"`` and a ``data-chart`` kind, so
the page opens offline and a test can count what was drawn. Bars and points carry a
``<title>``, which browsers show as a tooltip.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from html import escape

import numpy as np

from agent.timing.budget import Budget, percentile
from agent.timing.record import TurnRecord
from agent.timing.timeline import GAP, PART_STAGES, REPORT_ORDER, STAGES

WIDTH = 1040
LABEL_W = 150
VALUE_W = 110
PLOT_W = WIDTH - LABEL_W - VALUE_W
FONT = 'font-family="system-ui, -apple-system, Segoe UI, sans-serif" font-size="12"'

STAGE_COLORS = {
    "voice_to_voice": "#3b4252",
    "endpointing": "#5e81ac",
    "stt_final": "#88c0d0",
    GAP: "#b8b8b8",
    "llm_ttft": "#d08770",
    "first_phrase": "#ebcb8b",
    "tts_ttfb": "#a3be8c",
    "transport_out": "#b48ead",
    "retrieval": "#8fbcbb",
    "tool": "#bf616a",
}
BUDGET_RED = "#bf3b3b"
MEASURE_BLUE = "#2e5f99"


def nice_step(span: float, max_ticks: int = 9) -> float:
    """A round tick step (1, 2, 2.5 or 5 times a power of ten) giving at most max_ticks."""
    span = max(span, 1e-9)
    base = 10 ** math.floor(math.log10(span / max_ticks))
    for mult in (1, 2, 2.5, 5, 10):
        if span / (base * mult) <= max_ticks:
            return base * mult
    return base * 10


def axis_max(values: Iterable[float | None]) -> float:
    """The upper end of a ms axis: a little past the largest value, on a tick."""
    top = max((v for v in values if v is not None), default=1.0)
    step = nice_step(top * 1.04)
    return math.ceil(top * 1.04 / step) * step


class Scale:
    """Linear ms -> x pixels over the plot area."""

    def __init__(self, hi: float, lo: float = 0.0, x0: float = LABEL_W, width: float = PLOT_W):
        self.lo, self.hi, self.x0, self.width = lo, hi, x0, width

    def __call__(self, value: float) -> float:
        frac = (value - self.lo) / (self.hi - self.lo or 1.0)
        return round(self.x0 + min(max(frac, 0.0), 1.0) * self.width, 1)


def _fmt(value: float) -> str:
    return f"{value:.0f}" if abs(value) >= 10 or value == int(value) else f"{value:.1f}"


def _grid(scale: Scale, top: float, bottom: float, unit: str = "ms") -> str:
    """Vertical grid lines with tick labels under the plot."""
    step = nice_step(scale.hi - scale.lo)
    parts = []
    tick = math.ceil(scale.lo / step) * step
    while tick <= scale.hi + 1e-9:
        x = scale(tick)
        parts.append(f'<line x1="{x}" y1="{top}" x2="{x}" y2="{bottom}" stroke="#e3e6ea"/>')
        parts.append(
            f'<text x="{x}" y="{bottom + 14}" text-anchor="middle" fill="#6b7280">'
            f"{_fmt(tick)}</text>"
        )
        tick += step
    parts.append(
        f'<text x="{scale.x0 + scale.width + 26}" y="{bottom + 14}" fill="#6b7280">{unit}</text>'
    )
    return "".join(parts)


def _svg(kind: str, height: float, body: str, label: str) -> str:
    return (
        f'<svg class="chart" data-chart="{kind}" role="img" aria-label="{escape(label)}" '
        f'xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height}" '
        f'style="width:100%;max-width:{WIDTH}px;height:auto;display:block" {FONT}>{body}</svg>'
    )


def _vline(x: float, top: float, bottom: float, color: str, dash: str = "", width=1.5) -> str:
    dashed = f' stroke-dasharray="{dash}"' if dash else ""
    return (
        f'<line x1="{x}" y1="{top}" x2="{x}" y2="{bottom}" stroke="{color}" '
        f'stroke-width="{width}"{dashed}/>'
    )


# -- per-turn waterfall ------------------------------------------------------------------------


def waterfall_rows(record: TurnRecord) -> list[tuple[str, float, float, float | None]]:
    """(name, start, end, reported ms) per bar, in ms after speech_end; [] if none can be drawn.

    Bars sit where their events happened, so stages and the gap line up one after the other
    and end exactly at voice_to_voice; a negative gap (a speculative LLM request) overlaps.
    """
    events = record.events
    origin = events["speech_end"]
    if origin is None:
        return []

    def at(name: str) -> float | None:
        value = events[name]
        return None if value is None else value - origin

    stages, gaps = record.stages, record.gaps
    rows: list[tuple[str, float, float, float | None]] = []
    split = PART_STAGES.index("stt_final") + 1  # the gap follows the final transcript
    order = ["voice_to_voice", *PART_STAGES[:split], GAP, *PART_STAGES[split:]]
    for name in order:
        if name == GAP:
            turn_end, final, request = at("turn_end"), at("stt_final"), at("llm_request")
            if None in (turn_end, final, request):
                continue
            ready = max(turn_end, final)  # type: ignore[type-var]
            rows.append((name, ready, request, gaps[name]))  # type: ignore[arg-type]
            continue
        a, b = (at(e) for e in STAGES[name])
        if a is None or b is None:
            continue
        if name == "stt_final":
            b = max(a, b)  # ready before turn_end: a zero-length stage, the lead is marked
        rows.append((name, a, b, stages[name]))
    return rows


def waterfall_svg(record: TurnRecord, budget: Budget) -> str:
    """One turn's stages and gap as bars on its timeline from speech_end, with the budget line.

    Each turn gets its own axis (up to its slowest event, at least past the budget line), so a
    slow outlier does not flatten the other turns; the budget line is the common yardstick.
    """
    rows = waterfall_rows(record)
    limit = budget.stages["voice_to_voice"].ceiling
    scale = Scale(axis_max([*(max(a, b) for _, a, b, _ in rows), limit * 1.1]))
    row_h, bar_h, top = 21, 14, 26
    bottom = top + row_h * max(len(rows), 1)
    parts = [_grid(scale, top - 4, bottom)]
    if not rows:
        parts.append(
            f'<text x="{LABEL_W}" y="{top + 14}" fill="{BUDGET_RED}">no speech_end recorded: '
            "nothing to draw</text>"
        )
    verdicts = record.budget
    for i, (name, a, b, reported) in enumerate(rows):
        y = top + i * row_h
        lo, hi = sorted((a, b))
        x, w = scale(lo), max(scale(hi) - scale(lo), 1.5)
        gap = name in STAGE_COLORS and name not in STAGES
        label = f"gap {name.replace('_to_', '→')}" if gap else name
        weight = ' font-weight="600"' if name == "voice_to_voice" else ""
        style = ' font-style="italic"' if gap else ""
        parts.append(
            f'<text x="{LABEL_W - 8}" y="{y + bar_h - 2}" text-anchor="end" fill="#374151"'
            f"{weight}{style}>{label}</text>"
        )
        span = f"{_fmt(a)} → {_fmt(b)} ms after speech_end"
        fill = STAGE_COLORS[name]
        if gap and b < a:
            fill = "url(#overlap)"
        parts.append(
            f'<rect class="bar" data-stage="{name}" x="{x}" y="{y}" width="{round(w, 1)}" '
            f'height="{bar_h}" rx="2" fill="{fill}"><title>{label}: '
            f"{_fmt(reported if reported is not None else b - a)} ms ({span})</title></rect>"
        )
        over = verdicts.get(name) == "fail"
        text = "–" if reported is None else f"{_fmt(reported)} ms"
        if over:
            text += " ▲"
        colour = BUDGET_RED if over else "#111827"
        parts.append(
            f'<text x="{WIDTH - VALUE_W + 10}" y="{y + bar_h - 2}" fill="{colour}"{weight}>'
            f"{text}</text>"
        )
        if name == "stt_final" and record.stt_lead_ms:
            lead = record.stt_lead_ms
            mx = scale(a - lead)
            parts.append(
                f'<path d="M{mx} {y + 1} l5 6 l-5 6 l-5 -6 z" fill="{STAGE_COLORS[name]}" '
                f'stroke="#2f3e4e" stroke-width="0.8"><title>final transcript ready '
                f"{_fmt(lead)} ms before turn_end</title></path>"
                f'<text x="{mx + 8}" y="{y + bar_h - 2}" fill="#6b7280">ready '
                f"{_fmt(lead)} ms early</text>"
            )
    bx = scale(limit)
    parts.append(_vline(bx, 6, bottom, BUDGET_RED, "6 4", 2))
    parts.append(
        f'<text class="budget-line" x="{bx + 5}" y="14" fill="{BUDGET_RED}" font-weight="600">'
        f"budget {_fmt(limit)} ms</text>"
    )
    defs = (
        '<defs><pattern id="overlap" width="6" height="6" patternUnits="userSpaceOnUse" '
        'patternTransform="rotate(45)"><rect width="3" height="6" fill="#b8b8b8"/></pattern></defs>'
    )
    v2v = record.stages["voice_to_voice"]
    aria = f"turn {record.turn} waterfall, voice to voice {_fmt(v2v) if v2v else 'none'} ms"
    return _svg("waterfall", bottom + 22, defs + "".join(parts), aria)


# -- voice-to-voice distribution -----------------------------------------------------------------


def cdf_svg(values: list[float], labels: list[str], budget: Budget) -> str:
    """Empirical CDF of voice_to_voice with p50/p95 measured and budgeted marked."""
    limit = budget.stages["voice_to_voice"]
    top, plot_h = 70, 190
    bottom = top + plot_h
    scale = Scale(axis_max([*values, limit.p50, limit.p95]))
    parts = [_grid(scale, top, bottom)]
    for frac in (0, 0.25, 0.5, 0.75, 1.0):
        y = bottom - frac * plot_h
        parts.append(
            f'<line x1="{LABEL_W}" y1="{y}" x2="{LABEL_W + PLOT_W}" y2="{y}" stroke="#e3e6ea"/>'
            f'<text x="{LABEL_W - 8}" y="{y + 4}" text-anchor="end" fill="#6b7280">'
            f"{frac:.0%}</text>"
        )
    parts.append(
        f'<text x="{LABEL_W - 70}" y="{top + plot_h / 2}" fill="#374151" text-anchor="middle" '
        f'transform="rotate(-90 {LABEL_W - 70} {top + plot_h / 2})">turns at or below</text>'
    )
    if values:
        order = np.argsort(values, kind="stable")
        xs = [values[i] for i in order]
        n = len(xs)
        path = [f"M{scale(0)} {bottom}", f"H{scale(xs[0])}"]
        for i, x in enumerate(xs):
            path.append(f"H{scale(x)} V{round(bottom - (i + 1) / n * plot_h, 1)}")
        path.append(f"H{scale(scale.hi)}")
        parts.append(
            f'<path class="cdf" d="{" ".join(path)}" fill="none" stroke="{MEASURE_BLUE}" '
            'stroke-width="2.2"/>'
        )
        for rank, i in enumerate(order, start=1):
            y = round(bottom - rank / n * plot_h, 1)
            parts.append(
                f'<circle class="turn-dot" cx="{scale(values[i])}" cy="{y}" r="4" '
                f'fill="{MEASURE_BLUE}"><title>{escape(labels[i])}: {_fmt(values[i])} ms'
                "</title></circle>"
            )
    marks = []
    if values:
        marks += [
            ("p50", percentile(values, 50), MEASURE_BLUE, ""),
            ("p95", percentile(values, 95), MEASURE_BLUE, "5 3"),
        ]
    marks += [
        (f"budget {p}", getattr(limit, p), BUDGET_RED, "" if p == "p50" else "6 4")
        for p in ("p50", "p95")
        if getattr(limit, p) is not None
    ]
    placed: list[float] = []
    for name, value, colour, dash in sorted(marks, key=lambda m: m[1]):
        x = scale(value)
        row = sum(1 for p in placed if abs(p - x) < 110)  # stagger labels that would collide
        placed.append(x)
        label_y = top - 8 - 14 * row
        parts.append(_vline(x, label_y - 10, bottom, colour, dash, 1.8))
        parts.append(
            f'<text class="mark" x="{x + 4}" y="{label_y}" fill="{colour}" font-weight="600">'
            f"{name} {_fmt(value)}</text>"
        )
    return _svg("v2v-cdf", bottom + 24, "".join(parts), "voice to voice cumulative distribution")


# -- per-stage box plots ----------------------------------------------------------------------


def boxplot_svg(
    values: dict[str, list[float]], gaps: dict[str, list[float]], budget: Budget
) -> str:
    """A box (quartiles), whiskers (min-max) and the turns as dots, per stage and gap."""
    names = [n for n in REPORT_ORDER if values.get(n)] + [n for n in gaps if gaps[n]]
    series = {**values, **gaps}
    bounds = [b.p95 or b.p50 for b in budget.stages.values()]
    scale = Scale(
        axis_max([*(max(series[n]) for n in names), *bounds]),
        lo=min(0.0, *(min(series[n]) for n in names)) if names else 0.0,
    )
    row_h, top = 30, 30
    bottom = top + row_h * max(len(names), 1)
    parts = [_grid(scale, top - 6, bottom)]
    parts.append(f'<text x="{WIDTH - VALUE_W + 10}" y="14" fill="#6b7280">p50 · p95 ms</text>')
    parts.append(
        f'<text x="{LABEL_W}" y="14" fill="#6b7280">box: quartiles · line: median · whiskers: '
        f'min–max · dots: turns · <tspan fill="{BUDGET_RED}">┃ budget p95  ┆ budget p50</tspan>'
        "</text>"
    )
    for i, name in enumerate(names):
        xs = series[name]
        y = top + i * row_h
        mid = y + row_h / 2 - 3
        if i == 1 and names[0] == "voice_to_voice":  # the total apart from its parts
            parts.append(
                f'<line x1="20" y1="{y - 1}" x2="{WIDTH - 10}" y2="{y - 1}" stroke="#c9ced6"/>'
            )
        q1, med, q3 = (percentile(xs, q) for q in (25, 50, 75))
        gap = name not in STAGES
        label = f"gap {name.replace('_to_', '→')}" if gap else name
        style = ' font-style="italic"' if gap else ""
        parts.append(
            f'<text x="{LABEL_W - 8}" y="{mid + 4}" text-anchor="end" fill="#374151"{style}>'
            f"{label}</text>"
        )
        parts.append(
            f'<line x1="{scale(min(xs))}" y1="{mid}" x2="{scale(max(xs))}" y2="{mid}" '
            'stroke="#4b5563"/>'
        )
        for end in (min(xs), max(xs)):
            parts.append(_vline(scale(end), mid - 5, mid + 5, "#4b5563", width=1))
        width = max(scale(q3) - scale(q1), 2)
        parts.append(
            f'<rect class="box" data-stage="{name}" x="{scale(q1)}" y="{mid - 9}" '
            f'width="{round(width, 1)}" height="18" fill="{STAGE_COLORS.get(name, "#999")}" '
            f'fill-opacity="0.75" stroke="#374151"><title>{label}: p25 {_fmt(q1)}, '
            f"median {_fmt(med)}, p75 {_fmt(q3)} ms over {len(xs)} turns</title></rect>"
        )
        parts.append(_vline(scale(med), mid - 9, mid + 9, "#111827", width=2.5))
        for j, x in enumerate(xs):
            jitter = ((j * 7) % 11 - 5) * 0.9
            parts.append(
                f'<circle cx="{scale(x)}" cy="{round(mid + jitter, 1)}" r="2.4" fill="#111827" '
                f'fill-opacity="0.55"><title>{_fmt(x)} ms</title></circle>'
            )
        limit = budget.stages.get(name)
        if limit is not None:
            if limit.p95 is not None:
                parts.append(_vline(scale(limit.p95), mid - 12, mid + 12, BUDGET_RED, width=2.5))
            if limit.p50 is not None:
                parts.append(_vline(scale(limit.p50), mid - 12, mid + 12, BUDGET_RED, "3 2", 2))
        over = limit is not None and budget.check({name: xs})
        parts.append(
            f'<text x="{WIDTH - VALUE_W + 10}" y="{mid + 4}" '
            f'fill="{BUDGET_RED if over else "#111827"}">{_fmt(med)} · '
            f"{_fmt(percentile(xs, 95))}</text>"
        )
    return _svg("stage-boxes", bottom + 24, "".join(parts), "per-stage box plots")


# -- the turn's audio, both channels ---------------------------------------------------------


def waveform_svg(
    clip: np.ndarray, rate: int, clip_start_ms: float, record: TurnRecord, index: int
) -> str:
    """Caller and bot envelopes of a turn's clip, with speech_end -> first_audio_out shaded."""
    seconds = len(clip) / rate
    scale = Scale(seconds)
    lane, top = 30, 8
    bins = int(PLOT_W / 2)
    parts = [_grid(scale, top, top + 2 * lane + 6, "s")]
    for ch, (name, colour) in enumerate((("caller", "#5e81ac"), ("bot", "#d08770"))):
        mid = top + lane / 2 + ch * (lane + 6)
        chunks = np.array_split(np.abs(clip[:, ch].astype(np.float32)) / 32768.0, bins)
        peaks = [float(c.max()) if len(c) else 0.0 for c in chunks]
        norm = max(max(peaks), 1e-3)
        pts = []
        for k, p in enumerate(peaks):
            x = round(LABEL_W + (k + 0.5) / bins * PLOT_W, 1)
            pts.append((x, round(p / norm * (lane / 2 - 1), 1)))
        upper = " ".join(f"{x},{round(mid - h, 1)}" for x, h in pts)
        lower = " ".join(f"{x},{round(mid + h, 1)}" for x, h in reversed(pts))
        parts.append(
            f'<text x="{LABEL_W - 8}" y="{mid + 4}" text-anchor="end" fill="{colour}" '
            f'font-weight="600">{name}</text>'
            f'<polygon class="wave" points="{upper} {lower}" fill="{colour}"/>'
        )
    start, end = record.events["speech_end"], record.events["first_audio_out"]
    bottom = top + 2 * lane + 6
    if start is not None and end is not None:
        a, b = (scale((t - clip_start_ms) / 1000.0) for t in (start, end))
        parts.append(
            f'<rect x="{a}" y="{top}" width="{round(b - a, 1)}" height="{bottom - top}" '
            f'fill="{BUDGET_RED}" fill-opacity="0.08"/>'
            + _vline(a, top, bottom, MEASURE_BLUE, "4 3")
            + _vline(b, top, bottom, "#d08770", "4 3")
            + f'<text x="{(a + b) / 2}" y="{top + lane + 8}" text-anchor="middle" '
            f'fill="{BUDGET_RED}" font-weight="600">{_fmt(end - start)} ms</text>'
        )
    parts.append(
        f'<line class="playhead" id="playhead-{index}" x1="{LABEL_W}" y1="{top - 4}" '
        f'x2="{LABEL_W}" y2="{bottom + 2}" stroke="#111827" stroke-width="1.5" '
        'visibility="hidden"/>'
    )
    return _svg(
        "waveform", bottom + 22, "".join(parts), f"turn {record.turn} audio, both channels"
    ).replace('class="chart"', f'class="chart" data-clip="{index}"')


def critical_path_svg(record: TurnRecord) -> str:
    """A turn's critical path (a CPU profile's run): per stage, a light bar for how long it
    lasted and a dark one for each piece of work that ran in it, labelled with its CPU time;
    the light bar's bare part is the wait. Empty for a record without one."""
    steps = record.critical_path or []
    if not steps:
        return ""
    row = 18
    t0 = min(s.start_ms for s in steps)
    span = max(max(s.end_ms for s in steps) - t0, 1.0)

    def x(ms: float) -> float:
        return LABEL_W + (ms - t0) / span * PLOT_W

    parts = []
    for i, step in enumerate(steps):
        y = i * row
        color = STAGE_COLORS.get(step.stage, "#999")
        ran = ", ".join(f"{r.kind} {r.cpu_ms:.0f}" for r in step.ran) or "nothing"
        width = max(x(step.end_ms) - x(step.start_ms), 1.0)
        parts.append(
            f'<text x="4" y="{y + 13}" {FONT}>{escape(step.stage)}</text>'
            f'<rect x="{x(step.start_ms):.1f}" y="{y + 3}" width="{width:.1f}" height="12" '
            f'fill="{color}" opacity="0.3"><title>{escape(step.stage)}: waited '
            f"{step.waited_ms:.0f} ms; ran (CPU ms): {escape(ran)}</title></rect>"
        )
        for r in step.ran:
            w = max(x(r.end_ms) - x(r.start_ms), 1.0)
            parts.append(
                f'<rect x="{x(r.start_ms):.1f}" y="{y + 6}" width="{w:.1f}" height="6" '
                f'fill="{color}"><title>{escape(r.kind)}: {r.cpu_ms:.0f} CPU ms</title></rect>'
            )
        parts.append(
            f'<text x="{LABEL_W + PLOT_W + 6}" y="{y + 13}" {FONT}>'
            f"waited {step.waited_ms:.0f} ms</text>"
        )
    height = len(steps) * row + 4
    return (
        f'<svg class="critical-path" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" role="img" aria-label="critical path">'
        f"{''.join(parts)}</svg>"
    )
