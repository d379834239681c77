"""The live commands, ``serve``, ``pool`` and ``talk``, added to the main ``voice-agent`` app."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from agent.cli.support import (
    ConfigOpt,
    LlmModelOpt,
    LlmUrlOpt,
    llm_flags,
    settings_from_flags,
    user_errors,
)
from agent.errors import UserError

if TYPE_CHECKING:
    from agent.live.call import Runtime
    from agent.live.health import LLMWatch
    from agent.live.retention import Retention
    from agent.settings import Settings

CallsDirOpt = Annotated[
    Path, typer.Option("--calls-dir", help="Each call writes <calls-dir>/<timestamp>-<kind>-<id>/.")
]
WavOpt = Annotated[bool, typer.Option("--wav/--no-wav", help="Also write call.wav per call.")]
DrainSecsOpt = Annotated[
    float | None,
    typer.Option(help="On SIGTERM, calls in progress may go on this long, none is taken."),
]


def _runtime_settings(
    config: Path | None, llm_url: str | None, llm_model: str | None, **more: Any
) -> Settings:
    return settings_from_flags(config, **llm_flags(llm_url, llm_model), **more)


@contextmanager
def _runtime(settings: Settings) -> Iterator[Runtime]:
    """Budget, models and LLM engine, loaded once for every call of this process."""
    from agent.live.call import Runtime
    from agent.pipeline import AgentModels, llm_engine
    from agent.timing.budget import load_budget

    budget = load_budget(settings.budget_file, settings.budget_profile)
    typer.echo("loading models and starting the LLM engine…", err=True)
    models = AgentModels.load(settings)
    with llm_engine(settings) as engine:
        yield Runtime(settings=settings, models=models, engine=engine, budget=budget)


def retention(settings: Settings) -> Retention:
    """The ``retention`` settings as the limits ``serve`` keeps ``calls/`` within."""
    from agent.live.retention import Retention

    kept = settings.retention
    days = kept.max_age_days
    return Retention(
        max_bytes=kept.max_bytes, max_count=kept.max_count,
        max_age_secs=None if days is None else days * 86400,
        min_free_bytes=kept.min_free_bytes,
    )  # fmt: skip


def _llm_watch(settings: Settings) -> LLMWatch | None:
    """A watch on the LLM server the calls need, where they need one (engine ``openai``
    with no fallback: a pool's worker and its shared server)."""
    from agent.live.health import LLMWatch
    from agent.llm.servers.local import models_answer

    llm = settings.llm
    if llm.engine != "openai" or llm.base_url is None or llm.fallback_url is not None:
        return None
    url, key = llm.base_url, llm.api_key.get_secret_value()
    return LLMWatch(lambda: models_answer(url, key, timeout=2.0), "the LLM server")


def _check_port_free(host: str, port: int) -> None:
    """Fail in one line before minutes of model loading if the port is taken."""
    if port == 0:
        return
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            raise UserError(
                f"cannot listen on {host}:{port} ({exc.strerror}): pick another --port"
            ) from None


def serve(
    host: Annotated[str, typer.Option(help="Address to listen on (loopback by default).")] = (
        "127.0.0.1"
    ),
    port: Annotated[int, typer.Option(help="TCP port for the page and both websockets.")] = 8765,
    calls_dir: CallsDirOpt = Path("calls"),
    wav: WavOpt = True,
    budget: Annotated[Path | None, typer.Option(help="Budget file.")] = None,
    profile: Annotated[str | None, typer.Option(help="Budget profile (e.g. cpu, gpu).")] = None,
    config: ConfigOpt = None,
    llm_url: LlmUrlOpt = None,
    llm_model: LlmModelOpt = None,
    token: Annotated[
        str | None,
        typer.Option(
            help="Shared secret every connection must present ('Authorization: Bearer', "
            "/phone/<token>, ?token= on the page only); required off loopback. Prefer "
            "VOICE_AGENT_SERVE__TOKEN: a flag shows in ps."
        ),
    ] = None,
    allowed_origin: Annotated[
        list[str] | None,
        typer.Option(
            help="Browser origin allowed on /browser besides the server's own (repeatable)."
        ),
    ] = None,  # fmt: skip
    max_calls: Annotated[
        int | None, typer.Option(help="Calls at once; the next connection gets HTTP 503.")
    ] = None,
    max_call_secs: Annotated[
        float | None, typer.Option(help="A call is ended (files written) after this long.")
    ] = None,
    drain_secs: DrainSecsOpt = None,
) -> None:
    """Serve live calls: a phone bridge (/phone, Twilio Media Streams) and a browser page (/)."""
    from agent.live.process_memory import freeze_startup_objects, settle_heap
    from agent.live.server import CallServer, check_serve_security, serve_calls

    settle_heap()

    settings = _runtime_settings(
        config, llm_url, llm_model, budget_file=budget, budget_profile=profile,
        serve__token=token, serve__allowed_origins=allowed_origin or None,
        serve__max_calls=max_calls, serve__max_call_secs=max_call_secs,
        serve__drain_secs=drain_secs,
    )  # fmt: skip
    opts = settings.serve
    secret = opts.token.get_secret_value() if opts.token else None
    twilio = opts.twilio_auth_token
    check_serve_security(host, secret, public_url=opts.public_url,
                         twilio=twilio is not None)  # before minutes of model loading  # fmt: skip
    _check_port_free(host, port)
    with _runtime(settings) as runtime:
        freeze_startup_objects()  # the models are loaded: each call's end collects the call only
        server = CallServer(
            runtime, calls_dir, record_wav=wav, say=lambda line: typer.echo(line),
            token=secret, allowed_origins=opts.allowed_origins, public_url=opts.public_url,
            twilio_auth_token=twilio.get_secret_value() if twilio else None,
            max_calls=opts.max_calls, max_calls_per_address=opts.max_calls_per_address,
            max_pending=opts.max_pending,
            max_call_secs=opts.max_call_secs, no_media_secs=opts.no_media_secs,
            retention=retention(settings), drain_secs=opts.drain_secs,
            llm_watch=_llm_watch(settings),
        )  # fmt: skip
        asyncio.run(serve_calls(server, host, port))


def pool(
    workers: Annotated[int, typer.Option(help="voice-agent serve processes.")] = 2,
    host: Annotated[str, typer.Option(help="Address HAProxy listens on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port HAProxy listens on.")] = 8765,
    cpus: Annotated[
        list[str] | None,
        typer.Option(help="Pin worker i to the i-th of these taskset CPU lists (repeatable)."),
    ] = None,
    calls_per_worker: Annotated[
        int | None, typer.Option(help="Calls one worker takes at once (serve.max_calls).")
    ] = None,
    calls_dir: CallsDirOpt = Path("calls"),
    drain_secs: DrainSecsOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Serve calls from several workers behind HAProxy, sharing one llama.cpp server."""
    import signal
    import threading

    from agent.live.pool import Pool
    from agent.live.server import check_serve_security

    settings = _runtime_settings(config, None, None, serve__max_calls=calls_per_worker,
                                 serve__drain_secs=drain_secs)  # fmt: skip
    token = settings.serve.token
    secret = token.get_secret_value() if token else None
    check_serve_security(host, secret)
    _check_port_free(host, port)
    stopping = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stopping.set())
    with Pool(settings, workers=workers, host=host, port=port, calls_dir=calls_dir, cpus=cpus,
              config=config, say=lambda line: typer.echo(line)) as running:  # fmt: skip
        running.run(stopping)
        typer.echo("stopping: draining the workers", err=True)


def talk(
    input_device: Annotated[
        str | None, typer.Option(help="Microphone: a device index or part of its name.")
    ] = None,
    output_device: Annotated[
        str | None, typer.Option(help="Speaker: a device index or part of its name.")
    ] = None,
    list_devices: Annotated[
        bool, typer.Option("--list-devices", help="List the sound devices and exit.")
    ] = False,
    calls_dir: CallsDirOpt = Path("calls"),
    wav: WavOpt = True,
    config: ConfigOpt = None,
    llm_url: LlmUrlOpt = None,
    llm_model: LlmModelOpt = None,
) -> None:
    """Talk to the agent through this machine's microphone and speaker (Ctrl-C hangs up)."""
    from agent.live.talk import import_sounddevice
    from agent.live.talk import talk as talk_call
    from agent.transports.sounddevice_io import describe_devices, resolve_device

    sd = import_sounddevice()
    if list_devices:
        lines = describe_devices(sd)
        if not lines:
            raise UserError("no sound device: PortAudio sees no audio device on this machine")
        typer.echo("\n".join(lines))
        return
    mic = resolve_device(sd, input_device, "input")
    speaker = resolve_device(sd, output_device, "output")
    settings = _runtime_settings(config, llm_url, llm_model)
    with _runtime(settings) as runtime:
        call = asyncio.run(
            talk_call(runtime, sd, input_device=mic, output_device=speaker, calls_dir=calls_dir,
                      record_wav=wav, say=lambda line: typer.echo(line))
        )  # fmt: skip
    typer.echo(f"call ended: {call.info.get('turns', 0)} turn(s); files in {call.dir}")


def register(app: typer.Typer) -> None:
    """Add ``serve`` and ``talk`` to the main app."""
    app.command("serve")(user_errors(serve))
    app.command("pool")(user_errors(pool))
    app.command("talk")(user_errors(talk))
