"""The HTML report: one self-contained file (inline SVG, CSS, audio; no network) for QA.

Its Content-Security-Policy runs only its own script (by hash) and loads nothing from
anywhere: transcripts and folder names are escaped, and were anything missed, it could not
run.
"""

from __future__ import annotations

from html import escape
from typing import Any

from agent.csp import content_security_policy
from agent.reports.clips import Clip, turn_clips
from agent.reports.load import Pool, Turn
from agent.reports.markdown import cache_line, ms
from agent.reports.pooled import gap_values, slowest_stage
from agent.reports.svg import (
    LABEL_W,
    PLOT_W,
    STAGE_COLORS,
    boxplot_svg,
    cdf_svg,
    critical_path_svg,
    waterfall_svg,
    waveform_svg,
)
from agent.timing.budget import Budget
from agent.timing.summary import stage_values
from agent.timing.timeline import REPORT_ORDER

CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #111827;
       background: #f4f5f7; margin: 0; }
main { max-width: 1080px; margin: 0 auto; padding: 20px 20px 60px; }
h1 { font-size: 22px; margin: 4px 0 2px; }
h2 { font-size: 17px; margin: 28px 0 8px; }
.sub { color: #6b7280; margin: 0 0 14px; }
.card { background: #fff; border: 1px solid #e3e6ea; border-radius: 8px; padding: 12px 14px;
        margin: 10px 0; overflow-x: auto; }
.kpis { display: flex; gap: 10px; flex-wrap: wrap; }
.kpi { background: #fff; border: 1px solid #e3e6ea; border-radius: 8px; padding: 8px 14px;
       min-width: 120px; }
.kpi b { display: block; font-size: 20px; }
.kpi span { color: #6b7280; font-size: 12px; }
.pass { color: #1f7a3d; } .fail { color: #bf3b3b; }
.badge { display: inline-block; padding: 1px 10px; border-radius: 10px; color: #fff;
         font-weight: 600; font-size: 13px; vertical-align: 3px; }
.badge.pass { background: #1f7a3d; color: #fff; } .badge.fail { background: #bf3b3b; color: #fff; }
table { border-collapse: collapse; width: 100%; }
th, td { padding: 4px 10px; border-bottom: 1px solid #eef0f2; text-align: right; }
th { color: #6b7280; font-weight: 600; font-size: 12px; }
td:first-child, th:first-child, td.text, th.text { text-align: left; }
td.fail { font-weight: 600; }
.swatch { display: inline-block; width: 10px; height: 10px; border-radius: 2px;
          margin-right: 6px; vertical-align: 0; }
.turn h3 { font-size: 15px; margin: 0 0 4px; }
.said { margin: 2px 0; color: #374151; }
.said b { display: inline-block; width: 42px; color: #6b7280; font-weight: 600; }
audio { width: 100%; margin-top: 4px; }
.note { color: #6b7280; font-size: 12px; }
ul.violations { margin: 6px 0; color: #bf3b3b; }
"""

SCRIPT = """
(function () {
  document.querySelectorAll('audio[data-clip]').forEach(function (audio) {
    var line = document.getElementById('playhead-' + audio.dataset.clip);
    if (!line) { return; }
    var x0 = Number(audio.dataset.x0), w = Number(audio.dataset.w);
    audio.addEventListener('timeupdate', function () {
      var x = x0 + w * (audio.currentTime / (audio.duration || 1));
      line.setAttribute('x1', x); line.setAttribute('x2', x);
      line.setAttribute('visibility', 'visible');
    });
  });
  var charts = document.querySelectorAll('svg.chart').length;
  document.body.dataset.charts = String(charts);
  document.title = document.title + ' [ready: ' + charts + ' charts]';
})();
"""


# Styles may be inline (the charts' colours are style attributes); scripts only by hash.
# frame-ancestors is not honoured in a <meta> policy, so it is left out here.
POLICY = content_security_policy(
    f"<script>{SCRIPT}</script>", style_src="'unsafe-inline'", img_src="data:",
    media_src="data:",
)  # fmt: skip


def _verdict_badge(verdict: str) -> str:
    return f'<span class="badge {verdict}">{verdict.upper()}</span>'


def _kpi(value: str, label: str, cls: str = "") -> str:
    return (
        f'<div class="kpi"><b class="{cls}">{escape(value)}</b><span>{escape(label)}</span></div>'
    )


def _budget_table(summary: dict[str, Any]) -> str:
    rows = []
    limits = summary["budget"]["stages"]
    for name in REPORT_ORDER:
        stats, limit = summary["stages"][name], limits.get(name, {})
        verdict = summary["stage_verdicts"][name]
        rows.append(
            f'<tr><td><span class="swatch" style="background:{STAGE_COLORS[name]}"></span>'
            f"{name}</td><td>{ms(limit.get('p50'))}</td><td>{ms(limit.get('p95'))}</td>"
            f"<td>{ms(stats['p50'])}</td><td>{ms(stats['p95'])}</td><td>{ms(stats['max'])}</td>"
            f'<td>{stats["n"]}</td><td class="text {verdict}">{verdict}</td></tr>'
        )
    for name, stats in summary["gaps"].items():
        rows.append(
            f'<tr><td><span class="swatch" style="background:{STAGE_COLORS[name]}"></span>'
            f"<i>gap {name}</i></td><td>–</td><td>–</td><td>{ms(stats['p50'])}</td>"
            f"<td>{ms(stats['p95'])}</td><td>{ms(stats['max'])}</td><td>{stats['n']}</td>"
            '<td class="text note">not budgeted</td></tr>'
        )
    head = (
        "<tr><th>stage</th><th>budget p50</th><th>budget p95</th><th>p50</th><th>p95</th>"
        '<th>max</th><th>turns</th><th class="text">verdict</th></tr>'
    )
    return f'<table class="budget">{head}{"".join(rows)}</table>'


def _worst_table(summary: dict[str, Any]) -> str:
    rows = [
        f"<tr><td>{escape(t['turn'])}</td><td>{ms(t['voice_to_voice_ms'])}</td>"
        f'<td class="text">{escape(t["slowest_stage"] or "–")}</td>'
        f'<td class="text">{escape(t["user_text"])}</td>'
        f'<td class="text">{escape(t["bot_text"])}</td></tr>'
        for t in summary["worst_turns"]
    ]
    head = (
        '<tr><th>turn</th><th>voice-to-voice ms</th><th class="text">slowest stage</th>'
        '<th class="text">user said</th><th class="text">bot said</th></tr>'
    )
    return f"<table>{head}{''.join(rows)}</table>"


def _turn_card(turn: Turn, index: int, clip: Clip | None, budget: Budget) -> str:
    record = turn.record
    v2v = turn.v2v
    limit = budget.stages["voice_to_voice"].ceiling
    if v2v is None:
        status = '<span class="fail">no answer</span>'
    else:
        cls = "fail" if v2v > limit else "pass"
        word = "over budget" if v2v > limit else "within budget"
        status = f'<span class="{cls}">{v2v:.0f} ms voice-to-voice, {word}</span>'
    slow = slowest_stage(record)
    extra = f" · slowest: {slow}" if slow else ""
    if record.interrupted:
        extra += " · interrupted by the caller"
    parts = [
        f'<section class="card turn" id="turn-{index}">',
        f"<h3>Turn {escape(turn.label)} — {status}{escape(extra)}</h3>",
        f'<p class="said"><b>user</b>{escape(record.user_text or "–")}</p>',
        f'<p class="said"><b>bot</b>{escape(record.bot_text or "–")}</p>',
        waterfall_svg(record, budget),
        critical_path_svg(record),
    ]
    if clip is not None and clip.audio is not None:
        parts.append(waveform_svg(clip.audio, clip.rate, clip.start_ms, record, index))
        if clip.bot_silent_after(record.events["first_audio_out"]):
            parts.append(
                '<p class="fail">call.wav: the bot channel is silent after first_audio_out, '
                "so this turn's voice-to-voice is not what the caller heard.</p>"
            )
        parts.append(
            f'<audio controls preload="none" data-clip="{index}" data-x0="{LABEL_W}" '
            f'data-w="{PLOT_W}" data-start-ms="{clip.start_ms:.3f}" src="{clip.data_uri()}">'
            "</audio>"
            f'<p class="note">call.wav from {clip.start_ms / 1000:.2f} s, both channels '
            "(left: caller, right: bot). Shaded: speech_end → first bot audio.</p>"
        )
    elif clip is not None:
        parts.append(f'<p class="note">no audio: {escape(clip.missing or "")}</p>')
    for error in record.errors:
        parts.append(f'<p class="fail">error: {escape(error)}</p>')
    parts.append("</section>")
    return "".join(parts)


def render_html(
    pool: Pool, summary: dict[str, Any], budget: Budget, *, audio: bool = True, extra: str = ""
) -> str:
    """The whole page from the pooled turns and their summary (agent.reports.pooled);
    ``extra``: sections (already escaped HTML) shown after the key figures."""
    values = stage_values(pool.records)
    v2v = summary["stages"]["voice_to_voice"]
    limit = budget.stages["voice_to_voice"]
    clips = turn_clips(pool) if audio else {}
    cache = summary["llm_cache"]
    kpis = "".join(
        [
            _kpi(
                f"{ms(v2v['p50'])} ms",
                f"voice-to-voice p50 (budget {ms(limit.p50)})",
                "fail" if limit.p50 and v2v["p50"] and v2v["p50"] > limit.p50 else "",
            ),
            _kpi(
                f"{ms(v2v['p95'])} ms",
                f"voice-to-voice p95 (budget {ms(limit.p95)})",
                "fail" if limit.p95 and v2v["p95"] and v2v["p95"] > limit.p95 else "",
            ),
            _kpi(f"{summary['answered_turns']} / {summary['turns']}", "turns answered"),
            _kpi(str(summary["interruptions"]), "interruptions"),
            _kpi(
                "–" if cache["ratio"] is None else f"{cache['ratio']:.0%}",
                "LLM prompt cache" + (" (not reported)" if cache["ratio"] is None else ""),
            ),
        ]
    )
    violations = "".join(f"<li>{escape(v)}</li>" for v in summary["violations"])
    runs = ", ".join(f"<code>{escape(r)}</code>" for r in summary["runs"])
    turns = "".join(
        _turn_card(t, i, clips.get(t.label) if audio else None, budget)
        for i, t in enumerate(pool.turns)
    )
    body = f"""
<main>
<h1>Latency report {_verdict_badge(summary["verdict"])}</h1>
<p class="sub">{summary["turns"]} turns from {runs} · budget profile
<b>{escape(summary["budget"]["profile"])}</b> · all times in ms from the user's speech end</p>
<div class="kpis">{kpis}</div>
{extra}
<h2>Budget per stage</h2>
<div class="card">{_budget_table(summary)}
{f'<ul class="violations">{violations}</ul>' if violations else ""}</div>
<h2>Voice-to-voice distribution</h2>
<div class="card">{cdf_svg(values["voice_to_voice"], [t.label for t in pool.turns if t.v2v is not None], budget)}</div>
<h2>Where the time goes, per stage</h2>
<div class="card">{boxplot_svg(values, gap_values(pool), budget)}</div>
<h2>Worst turns</h2>
<div class="card">{_worst_table(summary)}
<p class="note">LLM prompt cache: {escape(cache_line(cache))}.
Interruptions: {summary["interruptions"]} of {summary["turns"]} turns.</p></div>
<h2>Every turn</h2>
<p class="note">Bars sit where each stage happened after the user's speech end; the stages and
the gap add up to voice-to-voice. ▲ marks a stage over its per-turn budget (p95). A diamond marks a
final transcript that was ready before the turn ended.</p>
{turns}
</main>"""  # noqa: E501
    title = f"Latency report: {summary['verdict']} ({summary['turns']} turns)"
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{POLICY}">'
        '<meta name="referrer" content="no-referrer">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title><style>{CSS}</style></head>"
        f"<body>{body}<script>{SCRIPT}</script></body></html>\n"
    )
