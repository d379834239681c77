"""`voice-agent report RUN_DIR...` and `voice-agent compare BASE_DIR NEW_DIR`.

Both are commands of ``reports_app``, which agent/cli/main.py adds to the main app without a
group name, so they sit next to ``replay`` at the top level.
"""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from agent.cli.support import user_errors
from agent.errors import UserError
from agent.reports.compare import compare_pools, comparison_json, render_comparison
from agent.reports.html import render_html
from agent.reports.load import load_runs
from agent.reports.markdown import render_markdown
from agent.reports.pooled import pooled_summary
from agent.settings import load_settings
from agent.timing.budget import Budget, load_budget
from agent.timing.summary import verdict_lines

reports_app = typer.Typer()


class Format(StrEnum):
    """Report formats; each is written as report.<format>."""

    md = "md"
    html = "html"
    json = "json"


def resolve_budget(budget: Path | None, profile: str | None) -> Budget:
    """The budget the replay would use: flags, else VOICE_AGENT_BUDGET_* env, else defaults."""
    settings = load_settings(None, budget_file=budget, budget_profile=profile)
    return load_budget(settings.budget_file, settings.budget_profile)


def write_reports(
    run_dirs: list[Path],
    budget: Budget,
    out_dir: Path,
    formats: list[Format],
    *,
    worst: int = 5,
    audio: bool = True,
    extra_html: str = "",
) -> tuple[dict[str, Any], list[Path]]:
    """Pool the runs, write the requested reports; returns the pooled summary and the files."""
    pool = load_runs(run_dirs)
    summary = pooled_summary(pool, budget, worst=worst)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot write reports to {out_dir}: {exc.strerror}") from None
    written = []
    for fmt in dict.fromkeys(formats):
        path = out_dir / f"report.{fmt.value}"
        if fmt is Format.md:
            path.write_text(render_markdown(summary))
        elif fmt is Format.html:
            path.write_text(render_html(pool, summary, budget, audio=audio, extra=extra_html))
        else:
            path.write_text(json.dumps(summary, indent=2) + "\n")
        written.append(path)
    return summary, written


@reports_app.command("report")
@user_errors
def report(
    run_dirs: Annotated[
        list[Path], typer.Argument(help="Replay --out folders; several pool their turns.")
    ],
    budget: Annotated[
        Path | None, typer.Option(help="Budget file (default: the one shipped in the package).")
    ] = None,
    profile: Annotated[str | None, typer.Option(help="Budget profile (e.g. cpu, gpu).")] = None,
    check: Annotated[
        bool, typer.Option(help="Exit 1 when the pooled turns violate the budget.")
    ] = False,
    formats: Annotated[
        list[Format] | None,
        typer.Option("--format", "-f", help="md, html or json; repeat for several (default all)."),
    ] = None,
    out_dir: Annotated[
        Path | None, typer.Option("--out", help="Folder for the reports (default: first run).")
    ] = None,
    worst: Annotated[int, typer.Option(min=1, help="How many worst turns to list.")] = 5,
    audio: Annotated[
        bool, typer.Option(help="Embed each turn's audio from call.wav in the HTML.")
    ] = True,
) -> None:
    """Per-stage latency report of replay runs: Markdown, HTML with charts, JSON; budget gate."""
    the_budget = resolve_budget(budget, profile)
    target = out_dir or run_dirs[0]
    summary, written = write_reports(
        run_dirs, the_budget, target, formats or list(Format), worst=worst, audio=audio
    )
    for path in written:
        typer.echo(f"wrote {path}")
    for line in verdict_lines(summary):
        typer.echo(line)
    if check and summary["violations"]:
        raise typer.Exit(1)


@reports_app.command("compare")
@user_errors
def compare(
    base_dir: Annotated[Path, typer.Argument(help="Replay --out folder of the baseline.")],
    new_dir: Annotated[Path, typer.Argument(help="Replay --out folder of the candidate.")],
    tolerance_ms: Annotated[
        float, typer.Option(min=0, help="Allowed growth of a stage's p50/p95, in ms.")
    ] = 50.0,
    tolerance_pct: Annotated[
        float, typer.Option(min=0, help="Allowed growth as % of BASE (the larger allowance wins).")
    ] = 10.0,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """Per-stage p50/p95 change from BASE to NEW; exit 1 on a regression beyond the tolerance."""
    base, new = load_runs([base_dir]), load_runs([new_dir])
    changes = compare_pools(base, new, tolerance_ms, tolerance_pct)
    if as_json:
        typer.echo(json.dumps(comparison_json(changes), indent=2))
    else:
        typer.echo(render_comparison(changes, str(base_dir), str(new_dir), tolerance_ms,
                                     tolerance_pct), nl=False)  # fmt: skip
    worse = False
    from agent.evaluation.compare import compare_evals, load_eval, render_eval_comparison

    base_eval, new_eval = load_eval(base_dir), load_eval(new_dir)
    if base_eval is not None and new_eval is not None:  # two eval runs: their quality too
        figures = compare_evals(base_eval, new_eval)
        worse = any(f.worse for f in figures)
        if not as_json:
            typer.echo(render_eval_comparison(figures), nl=False)
    if worse or any(c.regressions for c in changes):
        raise typer.Exit(1)
