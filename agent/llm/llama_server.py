"""The embedded LLM engine: llama.cpp's OpenAI-compatible server on loopback, owned by the agent.

Started before the call, stopped after it. Its weights are mlock'ed where the OS allows,
so an idle minute does not page them out (DESIGN.md measured a 12.8 s answer after that).
It takes requests with its own random ``api_key`` only, and writes its output to ``log_path``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

import httpx

from agent.errors import UserError
from agent.llm.local_server import (
    auth_headers,
    last_log_line,
    new_api_key,
    open_log,
    terminate,
)
from agent.net import free_port
from agent.settings import LLMSettings

STARTUP_TIMEOUT_SECS = 120


class LlamaServer:
    """A ``llama_cpp.server`` process serving one GGUF model on 127.0.0.1."""

    def __init__(
        self, model_path: Path, settings: LLMSettings, port: int | None = None,
        api_key: str | None = None,
    ) -> None:  # fmt: skip
        self.model_path = model_path
        self.settings = settings
        self.port = port or free_port()
        self.api_key = api_key or new_api_key()
        self.log_path: Path | None = None
        self._log_file: IO[str] | None = None
        self._proc: subprocess.Popen | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def command(self) -> list[str]:
        s = self.settings
        return [
            sys.executable, "-m", "llama_cpp.server",
            "--model", str(self.model_path),
            "--host", "127.0.0.1", "--port", str(self.port),
            "--n_ctx", str(s.context_size),
            "--n_threads", str(s.threads), "--n_threads_batch", str(s.threads),
            "--use_mlock", "True",
            "--interrupt_requests", "False",  # concurrent calls must not cut each other off
            "--verbose", "False",
        ]  # fmt: skip

    def _models_ok(self, timeout: float) -> bool:
        response = httpx.get(f"{self.base_url}/models", headers=auth_headers(self.api_key),
                             timeout=timeout)  # fmt: skip
        return response.status_code == 200

    def start(self) -> LlamaServer:
        self.log_path, self._log_file = open_log(self.log_path, "llama-server-")
        self._proc = subprocess.Popen(
            self.command(), stdout=self._log_file, stderr=subprocess.STDOUT,
            env={**os.environ, "API_KEY": self.api_key},  # its settings read the environment
        )  # fmt: skip
        deadline = time.monotonic() + STARTUP_TIMEOUT_SECS
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                last = last_log_line(self.log_path) or f"exit status {self._proc.returncode}"
                self.stop()
                raise UserError(f"the llama.cpp server did not start: {last} "
                                f"(log: {self.log_path})")  # fmt: skip
            try:
                if self._models_ok(timeout=1):
                    return self
            except httpx.HTTPError:
                time.sleep(0.2)
        self.stop()
        raise UserError(f"the llama.cpp server did not answer within {STARTUP_TIMEOUT_SECS} s")

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def healthy(self, timeout: float = 2.0) -> bool:
        """Running and answering HTTP: a killed or wedged server is neither."""
        if not self.alive():
            return False
        try:
            return self._models_ok(timeout)
        except httpx.HTTPError:
            return False

    def restart(self) -> LlamaServer:
        """Replace a dead or wedged server with a fresh one on the same port (same base_url).

        Blocking, for seconds: call it off the event loop.
        """
        self.stop()
        return self.start()

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            terminate(proc, timeout=10)
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def __enter__(self) -> LlamaServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
