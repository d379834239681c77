"""The llama.cpp server the agent starts serves only the agent: a random API key that other
local users cannot read off its command line, and its output in a log file, not a pipe."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from agent import model_store
from agent.llm.servers.llama import LlamaServer

pytestmark = pytest.mark.slow


def test_the_embedded_server_wants_its_own_key_and_logs_to_a_file(settings):
    gguf = model_store.resolve(settings.llm.model, "llm", settings.models_dir)
    with LlamaServer(gguf, settings.llm) as server:
        models = f"{server.base_url}/models"
        assert httpx.get(models, timeout=10).status_code == 401
        wrong = {"Authorization": "Bearer not-the-key"}
        assert httpx.get(models, headers=wrong, timeout=10).status_code == 401
        right = {"Authorization": f"Bearer {server.api_key}"}
        assert httpx.get(models, headers=right, timeout=10).status_code == 200
        command_line = Path(f"/proc/{server.pid}/cmdline").read_bytes()
        assert server.api_key.encode() not in command_line
        assert server.log_path is not None and server.log_path.is_file()
    other = LlamaServer(gguf, settings.llm)
    assert other.api_key != server.api_key and len(server.api_key) >= 32
