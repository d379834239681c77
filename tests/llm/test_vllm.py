"""The vLLM engine: its command line (always), and a real vLLM server (VOICE_AGENT_TEST_VLLM=1).

The real tests run vLLM's CPU build from .venv-vllm (``scripts/setup_vllm.sh``; about 3.5 GB),
so they are skipped by default. The first server start compiles the model (about 2.5 minutes
on 2 cores); later starts reuse torch.compile's cache.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai
import pytest
from typer.testing import CliRunner

from agent.cli.main import app
from agent.llm.engines.chat import OpenAIChatEngine, Usage
from agent.llm.prompt import prompt_messages
from agent.llm.servers.vllm import VllmServer, vllm_command
from tests.support.clips import SAMPLES

pytestmark = pytest.mark.slow

REAL = os.environ.get("VOICE_AGENT_TEST_VLLM") == "1"
needs_vllm = pytest.mark.skipif(not REAL, reason="needs vLLM: set VOICE_AGENT_TEST_VLLM=1")
GENERATED = re.compile(r"^vllm:generation_tokens_total\{[^}]*\} ([0-9.e+]+)$", re.M)


# --- always: the command line, built without starting anything ---------------------------


def test_command_line_has_prefix_caching_and_cached_token_reporting():
    cmd = vllm_command(Path("/v/bin/python"), "/m/smol-hf", "smol", port=8123)
    assert cmd[:3] == ["/v/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    flags = " ".join(cmd[3:])
    for part in (
        "--model /m/smol-hf", "--served-model-name smol", "--host 127.0.0.1", "--port 8123",
        "--enable-prefix-caching", "--max-model-len 2048", "--enable-prompt-tokens-details",
    ):  # fmt: skip
        assert part in flags
    assert "--gpu-memory-utilization" not in flags and "--quantization" not in flags


def test_gpu_only_flags_only_on_a_gpu():
    kw = {"gpu_memory_utilization": 0.5, "quantization": "awq_marlin"}
    cpu = vllm_command(Path("py"), "m", "m", gpu=False, **kw)
    gpu = vllm_command(Path("py"), "m", "m", gpu=True, **kw)
    assert "--gpu-memory-utilization" not in cpu and "--quantization" not in cpu
    assert gpu[-4:] == ["--gpu-memory-utilization", "0.5", "--quantization", "awq_marlin"]


def test_cpu_build_gets_blocks_small_enough_to_cache_the_system_prompt(settings, tmp_path):
    cpu = VllmServer(settings.llm, tmp_path, gpu=False).command()
    gpu = VllmServer(settings.llm, tmp_path, gpu=True).command()
    assert cpu[-2:] == ["--block-size", "32"] and "--block-size" not in gpu


def test_default_model_means_its_converted_folder(settings, tmp_path):
    server = VllmServer(settings.llm, tmp_path, port=9, gpu=False)
    name = settings.llm.model
    assert server.model == str(tmp_path / f"{name}-hf")
    assert server.served_name == name and server.base_url.endswith(":9/v1")
    hub = VllmServer(settings.llm.model_copy(update={"model": "Org/Model-AWQ"}), tmp_path)
    assert (hub.model, hub.served_name) == ("Org/Model-AWQ", "Org/Model-AWQ")


def test_llm_serve_print_command_and_one_line_errors(settings, tmp_path):
    runner = CliRunner()
    done = runner.invoke(app, ["llm", "serve", "--print-command", "--port", "8111"])
    assert done.exit_code == 0, done.output
    assert "-m vllm.entrypoints.openai.api_server" in done.stdout
    assert "--port 8111" in done.stdout and "--enable-prefix-caching" in done.stdout
    missing = runner.invoke(app, ["llm", "serve", "--python", str(tmp_path / "nope")])
    assert missing.exit_code == 2
    assert missing.stderr.strip().splitlines() == [
        f"error: vLLM's python {tmp_path / 'nope'} is missing: run scripts/setup_vllm.sh"
    ]
    unconverted = runner.invoke(
        app, ["llm", "serve", "--python", sys.executable], env={"VOICE_AGENT_MODELS": str(tmp_path)}
    )
    assert unconverted.exit_code == 2
    assert unconverted.stderr.strip().splitlines() == [
        f"error: {settings.llm.model} has no vLLM conversion in "
        f"{tmp_path / (settings.llm.model + '-hf')}: run scripts/setup_vllm.sh"
    ]
    gguf = runner.invoke(app, ["llm", "serve", "--model", str(tmp_path / "x.gguf")])
    assert gguf.exit_code == 2 and "vLLM does not read GGUF" in gguf.stderr
    llama = runner.invoke(
        app, ["llm", "serve", "--engine", "llama-server", "--print-command", "--host", "0.0.0.0"]
    )
    assert llama.exit_code == 0, llama.output
    assert "-m agent.llm.servers.llama_cpp_python" in llama.stdout
    assert "--host 0.0.0.0" in llama.stdout


# --- with a real vLLM server ---------------------------------------------------------------


@pytest.mark.vllm
@needs_vllm
def test_replay_turn_through_the_pipeline_with_engine_vllm(tmp_path):
    """First in the file: its own vLLM (started by llm_engine) runs before the module's."""
    done = subprocess.run(
        [sys.executable, "-m", "agent.cli", "replay", str(SAMPLES / "ldc93s1.wav"),
         "--out", str(tmp_path), "--llm-engine", "vllm"],
        capture_output=True, text=True, timeout=1500,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    (turn,) = [json.loads(line) for line in (tmp_path / "turns.jsonl").read_text().splitlines()]
    assert turn["bot_text"].strip(), turn
    assert turn["llm"]["completion_tokens"] > 0 and turn["llm"]["prompt_tokens"] > 0, turn
    assert turn["stages"]["llm_ttft"] is not None and turn["voice_to_voice_ms"] > 0


@pytest.fixture(scope="module")
def vllm(settings, tmp_path_factory) -> VllmServer:
    log = tmp_path_factory.mktemp("vllm") / "vllm.log"
    server = VllmServer(settings.llm, settings.models_dir, log=log)
    with server:
        yield server


@pytest.fixture
def engine(vllm, settings) -> OpenAIChatEngine:
    return OpenAIChatEngine(vllm.base_url, vllm.served_name, settings.llm, api_key=vllm.api_key)


async def collect(engine: OpenAIChatEngine, messages: list[dict]) -> tuple[list[str], Usage]:
    items = [x async for x in engine.stream(messages, max_tokens=32)]
    usage = items[-1]
    assert isinstance(usage, Usage)
    return [x for x in items[:-1] if isinstance(x, str)], usage


@pytest.mark.vllm
@needs_vllm
async def test_streams_and_reuses_the_cached_prefix(engine, settings):
    s = settings.llm
    history = [{"role": "user", "content": "What is the capital of France?"}]
    texts, first = await collect(engine, prompt_messages(s.opening, history, 4))
    assert len(texts) > 1 and "".join(texts).strip()  # streamed, not one lump
    assert first.prompt_tokens and first.completion_tokens
    history += [
        {"role": "assistant", "content": "".join(texts)},
        {"role": "user", "content": "And how many people live there?"},
    ]
    texts, second = await collect(engine, prompt_messages(s.opening, history, 4))
    assert "".join(texts).strip()
    # The system prompt and the first exchange are the same prefix: vLLM says it reused it.
    assert second.cached_tokens and second.cached_tokens > 0, second
    assert second.cached_tokens < second.prompt_tokens


def generated_total(vllm: VllmServer) -> float:
    text = httpx.get(vllm.metrics_url, timeout=5).text
    return sum(float(v) for v in GENERATED.findall(text))


@pytest.mark.vllm
@needs_vllm
async def test_a_closed_stream_stops_decoding(vllm, settings):
    """The engine's own counter stops soon after the client closes the stream.

    ``ignore_eos`` and a large ``max_tokens``: left alone it would decode 1500 tokens.
    The stream is left the way OpenAIChatEngine leaves it on an interruption.
    """
    client = openai.AsyncOpenAI(base_url=vllm.base_url, api_key=vllm.api_key, max_retries=0)
    before = generated_total(vllm)
    stream = await client.chat.completions.create(
        model=vllm.served_name,
        messages=[{"role": "user", "content": "Tell me a very long story about a dragon."}],
        max_tokens=1500, temperature=0.7, stream=True, extra_body={"ignore_eos": True},
    )  # fmt: skip
    received = 0
    async with stream:
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                received += 1
                if received >= 20:
                    break
    closed = time.monotonic()
    await asyncio.sleep(1.5)
    settled = generated_total(vllm)
    await asyncio.sleep(2.0)
    assert generated_total(vllm) == settled, "still decoding 1.5 s after the stream closed"
    decoded = settled - before
    assert received <= decoded < received + 200, (received, decoded)
    print(f"received {received}, decoded {decoded:.0f}; checked {time.monotonic() - closed:.1f} s")
