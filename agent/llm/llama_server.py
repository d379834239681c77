"""The embedded LLM engine: llama.cpp's OpenAI-compatible server on loopback, owned by the agent.

Started before the call, stopped after it. Its weights are mlock'ed where the OS allows,
so an idle minute does not page them out (DESIGN.md measured a 12.8 s answer after that).
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from agent.errors import UserError
from agent.settings import LLMSettings

STARTUP_TIMEOUT_SECS = 120


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LlamaServer:
    """A ``llama_cpp.server`` process serving one GGUF model on 127.0.0.1."""

    def __init__(self, model_path: Path, settings: LLMSettings, port: int | None = None) -> None:
        self.model_path = model_path
        self.settings = settings
        self.port = port or free_port()
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

    def start(self) -> LlamaServer:
        self._proc = subprocess.Popen(
            self.command(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        deadline = time.monotonic() + STARTUP_TIMEOUT_SECS
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                err = (self._proc.stderr.read() if self._proc.stderr else "").strip()
                last = err.splitlines()[-1] if err else f"exit status {self._proc.returncode}"
                raise UserError(f"the llama.cpp server did not start: {last}")
            try:
                if httpx.get(f"{self.base_url}/models", timeout=1).status_code == 200:
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
            return httpx.get(f"{self.base_url}/models", timeout=timeout).status_code == 200
        except httpx.HTTPError:
            return False

    def restart(self) -> LlamaServer:
        """Replace a dead or wedged server with a fresh one on the same port (same base_url).

        Blocking, for seconds: call it off the event loop.
        """
        self.stop()
        return self.start()

    def stop(self) -> None:
        if self._proc is None:
            return
        if self._proc.poll() is not None:  # already gone (killed): just reap it
            self._proc = None
            return
        self._proc.terminate()
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._proc = None

    def __enter__(self) -> LlamaServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
