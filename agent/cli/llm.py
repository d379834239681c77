"""``voice-agent llm serve``: an LLM server in the foreground, for agents that point at its URL.

The agent can start its engine itself (``llm.engine: vllm`` or ``llama-server``); this command
runs the same server, with the same flags, on its own: on a GPU box next to several agents, or
to look at its log. ``--print-command`` shows the exact command line and starts nothing.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import time
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from agent import model_store
from agent.cli.support import ConfigOpt, settings_from_flags, user_errors
from agent.errors import UserError
from agent.llm.servers.llama import LlamaServer
from agent.llm.servers.local import models_answer
from agent.llm.servers.vllm import VllmServer
from agent.net import is_loopback

llm_app = typer.Typer(help="LLM servers: run vLLM or llama.cpp's OpenAI server in the foreground.")


class ServeEngine(StrEnum):
    vllm = "vllm"
    llama_server = "llama-server"


def _llama_command(cmd: list[str], host: str, python: Path | None) -> list[str]:
    """LlamaServer's own command line, on the asked address and python."""
    cmd = list(cmd)
    cmd[cmd.index("--host") + 1] = host
    if python is not None:
        cmd[0] = str(python)
    return cmd


def _wait_foreground(proc: subprocess.Popen, base_url: str, api_key: str | None, name: str) -> int:
    """Say once when the server answers, then wait; Ctrl-C reaches the server too (same
    process group) and it is given time to shut down cleanly."""
    ready = False
    try:
        while proc.poll() is None:
            if not ready and models_answer(base_url, api_key, 2):
                ready = True
                typer.echo(f"ready: {base_url} serves {name}", err=True)
            time.sleep(0.5)
    except KeyboardInterrupt:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        return 0
    return proc.returncode


@llm_app.command("serve")
@user_errors
def serve(
    engine: Annotated[ServeEngine, typer.Option(help="Which server.")] = ServeEngine.vllm,
    model: Annotated[
        str | None,
        typer.Option(
            help="vllm: a default model name (converted by scripts/setup_vllm.sh), a "
            "safetensors folder or a hub id; llama-server: a default name or a GGUF path."
        ),
    ] = None,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = 8000,
    max_model_len: Annotated[
        int | None, typer.Option(help="Context length in tokens (default: llm.context_size).")
    ] = None,
    gpu_memory_utilization: Annotated[
        float | None, typer.Option(help="vllm on a GPU: share of GPU memory to take (0-1].")
    ] = None,
    python: Annotated[
        Path | None,
        typer.Option(help="Python that runs the server (vllm default: .venv-vllm/bin/python)."),
    ] = None,
    print_command: Annotated[
        bool, typer.Option("--print-command", help="Print the command line and exit.")
    ] = False,
    config: ConfigOpt = None,
) -> None:
    """Run an OpenAI-compatible LLM server in the foreground until Ctrl-C."""
    settings = settings_from_flags(
        config, llm__model=model, llm__context_size=max_model_len,
        llm__vllm_gpu_memory_utilization=gpu_memory_utilization, llm__vllm_python=python,
    )  # fmt: skip
    s = settings.llm
    env, key_variable = None, "VLLM_API_KEY"
    if engine is ServeEngine.vllm:
        server = VllmServer(s, settings.models_dir, host=host, port=port, log="inherit")
        cmd, name = server.command(), server.served_name
        if gpu_memory_utilization is not None and not server.gpu:
            typer.echo("warning: no GPU here: --gpu-memory-utilization is left out", err=True)
    else:
        if gpu_memory_utilization is not None:
            raise UserError("--gpu-memory-utilization is a vLLM flag, not llama-server's")
        gguf = model_store.resolve(s.model, "llm", settings.models_dir)
        llama = LlamaServer(gguf, s, port=port)
        if python is not None and llama.native:
            raise UserError("--python runs llama-cpp-python's server, which has one slot: "
                            "leave it out with llm.server_slots > 1")  # fmt: skip
        cmd, name = _llama_command(llama.command(), host, python), gguf.stem
        key_variable = llama.key_variable
    if print_command:
        typer.echo(shlex.join(cmd))
        return
    # The key, if any, is the user's own: the variable each server reads.
    api_key = os.environ.get(key_variable)
    if not is_loopback(host) and not api_key:
        typer.echo(f"warning: {host} is not loopback and the server asks for no key", err=True)
    if engine is ServeEngine.vllm:
        server.check()
        env = server.environment(own_key=False)
    typer.echo(f"starting {engine.value} on http://{host}:{port}/v1 (Ctrl-C stops it)", err=True)
    proc = subprocess.Popen(cmd, env=env)
    probe = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    rc = _wait_foreground(proc, f"http://{probe}:{port}/v1", api_key, name)
    if rc != 0:
        raise UserError(f"the {engine.value} server exited with status {rc}")
