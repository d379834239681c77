"""``voice-agent eval MANIFEST.jsonl... --out DIR``: replay a corpus and grade it."""

from __future__ import annotations

import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from agent.cli import support as opts
from agent.evaluation.html import digits_cell, eval_section, overall_lines, pct
from agent.reports.markdown import ms


class Line(StrEnum):
    """The line the clips come in on."""

    wideband = "wideband"  # as recorded, 16 kHz
    phone = "phone"  # through the phone bridge's codec


out = Console(width=None if sys.stdout.isatty() else 160)


def print_eval(report: dict[str, Any]) -> None:
    """The per-clip table and the corpus figures, as a QA reader scans them."""
    title = f"Clips ({report['pace']} pace, {report['line']} line)"
    table = Table(title=title, show_lines=False)
    for name, justify in (
        ("clip", "left"), ("turns", "right"), ("WER stream", "right"), ("WER offline", "right"),
        ("cut-offs", "right"), ("talk-over ms", "right"), ("lost", "right"), ("digits", "right"),
        ("v2v ms", "right"), ("heard", "left"), ("answer problems", "left"),
    ):  # fmt: skip
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for c in report["clips"]:
        n = c["reference_words"] or 1
        problems = sorted({p for turn in c["answer_problems"] for p in turn})
        turns = f"{c['turns']}/{c['expected_turns']}" + (" merged" if c["merged"] else "")
        table.add_row(
            Path(c["clip"]).name, turns, pct(c["streaming_errors"] / n),
            pct(c["offline_errors"] / n), str(len(c["cutoffs"])) if c["cutoffs"] else "",
            ms(c["talk_over_ms"]), str(c["words_lost"] or ""), digits_cell(c),
            ms(c["voice_to_voice_ms"]), c["streaming_text"][:60], ", ".join(problems),
        )  # fmt: skip
    out.print(table)
    for c in report["clips"]:
        heard = [f"heard twice: {', '.join(map(repr, c['duplicated']))}"] if c["duplicated"] else []
        heard += [f"stray words: {' '.join(c['stray'])}"] if c["stray"] else []
        if heard:
            out.print(f"{Path(c['clip']).name}: {'; '.join(heard)}", highlight=False)
    o = report["overall"]
    v2v, endp, ans = o["voice_to_voice_callwav"], o["endpointing"], o["answers"]
    out.print(
        f"WER streaming {pct(o['wer_streaming'])} vs offline {pct(o['wer_offline'])} "
        f"(gap {pct(o['wer_gap'])}) over {o['clips']} clips, {o['reference_words']} words; "
        f"{o['duplicated_phrases']} duplicated phrases, {o['stray_words']} stray words\n"
        f"turns {o['turns']} for {o['expected_turns']} expected: {o['splits']} split, "
        f"{o['merges']} merged, {o['empty_turns']} empty; cut-offs {o['cutoffs']} "
        f"({o['clips_cut_off']} clips, {pct(o['cutoff_rate'])})\n"
        f"voice-to-voice (call.wav) p50 {ms(v2v['p50'])} / p95 {ms(v2v['p95'])} ms; "
        f"endpointing p50 {ms(endp['p50'])} / p95 {ms(endp['p95'])} ms\n"
        f"answers {ans['answered']}: empty {ans['empty']}, repeated {ans['repeated']}, "
        f"repeated sentence {ans['repeated_sentence']}, loop {ans['loop']}, echo {ans['echo']}",
        highlight=False,
    )
    out.print("; ".join(f"{label} {value}" for label, value in overall_lines(o)), highlight=False)
    verdict = "[green]pass[/green]" if report["verdict"] == "pass" else "[red]fail[/red]"
    out.print(f"eval verdict: {verdict}")
    for line in report["violations"]:
        out.print(f"  [red]over limit:[/red] {line}")


def register(app: typer.Typer) -> None:
    @app.command("eval")
    @opts.user_errors
    def eval_(
        manifests: Annotated[
            list[Path], typer.Argument(help="JSON-lines manifests: file, text[, expect_turns].")
        ],
        out_dir: Annotated[Path, typer.Option("--out", help="Folder for eval.json and calls.")],
        per_clip: Annotated[
            bool, typer.Option("--per-clip", help="One call per clip (default: one call).")
        ] = False,
        pace: opts.PaceOpt = opts.Pace.realtime,
        line: Annotated[
            Line, typer.Option(help="phone: every clip through the phone codec (8 kHz mu-law).")
        ] = Line.wideband,
        check: Annotated[
            bool, typer.Option(help="Exit 1 when an eval limit (or, real-time, the budget) breaks.")
        ] = False,
        budget: Annotated[
            Path | None, typer.Option(help="Budget file with an eval: section.")
        ] = None,
        profile: Annotated[str | None, typer.Option(help="Budget profile (e.g. cpu, gpu).")] = None,
        config: opts.ConfigOpt = None,
        llm_url: opts.LlmUrlOpt = None,
        llm_model: opts.LlmModelOpt = None,
        llm_engine_name: opts.LlmEngineOpt = None,
        asr_model: opts.AsrModelOpt = None,
    ) -> None:
        """Replay every clip of the manifests and grade what the agent heard, when it spoke
        and what it said (WER vs offline Whisper, splits, cut-offs, voice-to-voice, answers)."""
        from agent.cli.reports import Format, write_reports
        from agent.evaluation.manifest import load_manifest
        from agent.evaluation.run import evaluate
        from agent.replay import paced_settings
        from agent.timing.budget import load_budget, load_eval_limits

        settings = opts.settings_from_flags(
            config, budget_file=budget, budget_profile=profile,
            **opts.llm_flags(llm_url, llm_model, llm_engine_name), asr__model=asr_model,
        )  # fmt: skip
        settings = paced_settings(settings, pace)
        the_budget = load_budget(settings.budget_file, settings.budget_profile)
        limits = load_eval_limits(settings.budget_file)
        clips = [clip for m in manifests for clip in load_manifest(m)]
        report = opts.run_with_models(
            settings, f"replaying {len(clips)} clip(s) at {pace} pace…",
            lambda models, engine: evaluate(
                clips, out_dir, settings=settings, models=models, engine=engine,
                budget=the_budget, limits=limits, pace=pace, per_clip=per_clip, line=line,
            ),
        )  # fmt: skip
        write_reports(
            [out_dir], the_budget, out_dir, [Format.html, Format.md], audio=not per_clip,
            extra_html=eval_section(report),
        )  # fmt: skip
        print_eval(report)
        if check and report["verdict"] != "pass":
            raise typer.Exit(1)
