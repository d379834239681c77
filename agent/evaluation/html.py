"""The eval tables of the HTML report: corpus figures first, then one row per clip."""

from __future__ import annotations

from html import escape
from pathlib import Path
from typing import Any

from agent.reports.markdown import ms

COLUMNS = (
    "clip", "turns", "WER stream", "WER offline", "cut-offs", "talk-over ms", "words lost",
    "digits", "v2v ms", "ended by",
)  # fmt: skip
TEXT_COLUMNS = ("reference", "heard", "answered", "answer problems")


def pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f} %"


def digits_cell(clip: dict[str, Any]) -> str:
    """A dictation clip's number as heard: digits kept in order of all, whole in one turn."""
    if not clip.get("digits"):
        return ""
    whole = "whole" if clip["dictation_whole"] else "not whole"
    return f"{clip['digits_recalled']}/{len(clip['digits'])} {whole}"


def overall_lines(o: dict[str, Any]) -> list[tuple[str, str]]:
    """The figures of issue 52 (talk-over, words lost, dictation), label and value."""
    t, d = o["talk_over"], o["dictation"]
    over = f"{t['clips_over_200ms']} ({pct(t['share_over_200ms'])})"
    lost = f"{o['words_lost']} in {o['clips_losing_words']} clips"
    lines = [
        ("talk-over per clip p50 / p95", f"{ms(t['clips_p50'])} / {ms(t['clips_p95'])} ms"),
        ("talk-over per answer p50 / p95", f"{ms(t['turns_p50'])} / {ms(t['turns_p95'])} ms"),
        ("clips with talk-over > 200 ms", over),
        ("words lost (finals shorter than the last interim)", lost),
    ]
    if d["clips"]:
        lines.append((
            "dictation: whole in one turn · digits kept in order",
            f"{d['whole']} of {d['clips']} · {d['recalled']} of {d['digits']}",
        ))  # fmt: skip
    return lines


def eval_section(report: dict[str, Any]) -> str:
    """Escaped HTML: the corpus figures, the limits broken, and the per-clip table."""
    o = report["overall"]
    v2v, endp, ans = o["voice_to_voice_callwav"], o["endpointing"], o["answers"]
    figures = [
        ("WER streaming / offline", f"{pct(o['wer_streaming'])} / {pct(o['wer_offline'])}"),
        ("WER gap", pct(o["wer_gap"])),
        ("duplicated phrases · stray words", f"{o['duplicated_phrases']} · {o['stray_words']}"),
        ("turns / expected", f"{o['turns']} / {o['expected_turns']}"),
        ("splits · merges · empty turns", f"{o['splits']} · {o['merges']} · {o['empty_turns']}"),
        ("cut-offs (clips)", f"{o['cutoffs']} ({o['clips_cut_off']}, {pct(o['cutoff_rate'])})"),
        ("voice-to-voice from call.wav p50 / p95", f"{ms(v2v['p50'])} / {ms(v2v['p95'])} ms"),
        ("endpointing p50 / p95", f"{ms(endp['p50'])} / {ms(endp['p95'])} ms"),
        (
            "answers: empty · repeated · repeated sentence · loop · echo",
            f"{ans['empty']} · {ans['repeated']} · {ans['repeated_sentence']} · {ans['loop']}"
            f" · {ans['echo']} of {ans['answered']}",
        ),
        *overall_lines(o),
    ]
    rows = "".join(f"<tr><td>{escape(k)}</td><td>{escape(v)}</td></tr>" for k, v in figures)
    violations = "".join(f"<li>{escape(v)}</li>" for v in report["violations"])
    clips = []
    for c in report["clips"]:
        n = c["reference_words"] or 1
        problems = sorted({p for turn in c["answer_problems"] for p in turn})
        cells = [
            escape(Path(c["clip"]).name),
            f"{c['turns']}/{c['expected_turns']}" + (" merged" if c["merged"] else ""),
            pct(c["streaming_errors"] / n),
            pct(c["offline_errors"] / n),
            str(len(c["cutoffs"])),
            ms(c["talk_over_ms"]),
            str(c["words_lost"]),
            digits_cell(c),
            ms(c["voice_to_voice_ms"]),
            escape(", ".join(str(r) for r in c["ended_by"] if r)),
        ]
        texts = [
            escape(c["reference"]), escape(c["streaming_text"]), escape(" | ".join(c["answers"]))
        ]  # fmt: skip
        clips.append(
            "<tr>" + "".join(f"<td>{x}</td>" for x in cells)
            + "".join(f'<td class="text">{t}</td>' for t in texts)
            + f'<td class="text">{escape(", ".join(problems))}</td></tr>'
        )  # fmt: skip
    head = "".join(f"<th>{escape(h)}</th>" for h in COLUMNS) + "".join(
        f'<th class="text">{escape(h)}</th>' for h in TEXT_COLUMNS
    )
    return f"""
<h2>Eval ({escape(report["pace"])} pace) <span class="badge {report["verdict"]}">
{escape(report["verdict"])}</span></h2>
<div class="card"><table>{rows}</table>
{f'<ul class="violations">{violations}</ul>' if violations else ""}</div>
<h2>Eval per clip</h2>
<div class="card"><table><tr>{head}</tr>{"".join(clips)}</table></div>"""
