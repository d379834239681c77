"""What every ``voice-agent`` command shares: error handling, settings from flags, options.

Kept apart from ``agent.cli.main`` so the command groups that it registers (reports, live
calls) can import it without a circular import.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from rich.console import Console

from agent.errors import UserError
from agent.redact import redact_text
from agent.settings import Settings, load_settings

if TYPE_CHECKING:
    from agent.llm.engines.chat import ChatEngine
    from agent.pipeline import AgentModels

T = TypeVar("T")

ConfigOpt = Annotated[
    Path | None, typer.Option("--config", help="YAML settings file (see `voice-agent config`).")
]
AsrModelOpt = Annotated[
    str | None, typer.Option(help="whisper-tiny.en, whisper-base or a CTranslate2 dir.")
]
LlmUrlOpt = Annotated[
    str | None, typer.Option(help="OpenAI-compatible base URL instead of llama.cpp.")
]
LlmModelOpt = Annotated[str | None, typer.Option(help="LLM model name or GGUF path.")]
LlmEngineOpt = Annotated[
    str | None,
    typer.Option(
        "--llm-engine", help="llama-inprocess, llama-server, vllm or openai (default: llm.engine)."
    ),
]


class Pace(StrEnum):
    """How a replay feeds its audio (see agent.clock)."""

    realtime = "realtime"  # 20 ms frames on the wall clock: what latency is measured with
    compute = "compute"  # each frame once the work before it is done: the same on any machine


PaceOpt = Annotated[
    Pace,
    typer.Option(
        help="realtime: 20 ms frames on the wall clock (what latency is measured with); "
        "compute: each frame once the work before it is done (same result on any machine)."
    ),
]


def user_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Expected mistakes become one line on stderr and exit status 2, never a traceback.

    Messages that quote a parser (YAML) can span lines: they are joined, so a CI log shows
    exactly one line per problem.
    """

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except UserError as exc:
            typer.echo("error: " + " ".join(redact_text(str(exc)).split()), err=True)
            raise typer.Exit(2) from None

    return wrapper


def settings_from_flags(config: Path | None, **flags: Any) -> Settings:
    """Settings with CLI flags on top; ``section__name`` flags set nested settings."""
    nested: dict[str, Any] = {}
    for key, value in flags.items():
        if value is None:
            continue
        section, _, name = key.partition("__")
        if name:
            nested.setdefault(section, {})[name] = value
        else:
            nested[section] = value
    return load_settings(config, **nested)


def run_with_models(
    settings: Settings,
    doing: str,
    work: Callable[[AgentModels, ChatEngine], Coroutine[Any, Any, T]],
) -> T:
    """Load the models and start the LLM engine, then run ``work`` on them, with a status
    line on stderr throughout, since loading takes long enough to look like a hang."""
    from agent.pipeline import AgentModels, llm_engine

    with Console(stderr=True).status("loading models and starting the LLM engine…") as status:
        models = AgentModels.load(settings)
        with llm_engine(settings) as engine:
            status.update(doing)
            return asyncio.run(work(models, engine))


def llm_flags(
    llm_url: str | None, llm_model: str | None, llm_engine: str | None = None
) -> dict[str, Any]:
    """``--llm-url`` / ``--llm-model`` / ``--llm-engine`` as settings: a URL selects the
    OpenAI-compatible engine."""
    return {
        "llm__engine": "openai" if llm_url else llm_engine,
        "llm__base_url": llm_url,
        "llm__model": llm_model,
    }
