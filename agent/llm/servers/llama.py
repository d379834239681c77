"""The embedded LLM engine: llama.cpp's OpenAI-compatible server on loopback, owned by the agent.

Started before the call, stopped after it. Its weights are mlock'ed where the OS allows,
so an idle minute does not page them out and make the next answer wait for the disk.
It takes requests with its own random ``api_key`` only, and writes its output to ``log_path``.

One slot (``llm.server_slots``) runs llama-cpp-python's server, which answers one request at
a time, as the in-process engine does. Calls that share a server (``voice-agent pool``) need
more: llama.cpp's own ``llama-server`` decodes one answer per slot at once, in one batch, so
a second call's answer does not wait for the first one's to end.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from agent.errors import UserError
from agent.llm.servers.local import LocalServer, child_environment, models_answer, new_api_key
from agent.net import free_port
from agent.settings import LLMSettings

STARTUP_TIMEOUT_SECS = 120


def native_server() -> Path | None:
    """llama.cpp's own server where scripts/setup.sh --pool installs it: beside this Python."""
    path = Path(sys.executable).parent / "llama-server"
    return path if path.is_file() and os.access(path, os.X_OK) else None


class LlamaServer(LocalServer):
    """A llama.cpp server process serving one GGUF model on 127.0.0.1."""

    name = "the llama.cpp server"

    def __init__(
        self, model_path: Path, settings: LLMSettings, port: int | None = None,
        api_key: str | None = None,
    ) -> None:  # fmt: skip
        super().__init__()
        self.model_path = model_path
        self.settings = settings
        self.port = port or free_port()
        self.api_key = api_key or new_api_key()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def slots(self) -> int:
        return self.settings.server_slots or 1

    @property
    def native(self) -> bool:
        """Whether this is llama.cpp's own server (more than one slot), not llama-cpp-python's."""
        return self.slots > 1

    def command(self) -> list[str]:
        s = self.settings
        if self.native:
            return self._native_command()
        return [
            # llama_cpp.server, on one thread
            sys.executable, "-m", "agent.llm.servers.llama_cpp_python",
            "--model", str(self.model_path),
            "--host", "127.0.0.1", "--port", str(self.port),
            "--n_ctx", str(s.context_size),
            "--n_threads", str(s.threads), "--n_threads_batch", str(s.threads),
            "--use_mlock", "True",
            "--interrupt_requests", "False",  # concurrent calls must not cut each other off
            "--verbose", "False",
        ]  # fmt: skip

    def _native_command(self) -> list[str]:
        s, binary = self.settings, native_server()
        if binary is None:
            raise UserError(
                f"llm.server_slots {self.slots} needs llama.cpp's own llama-server: run "
                "bash scripts/setup.sh --pool (builds it once, about 10 minutes), or set "
                "llm.server_slots to 1"
            )
        return [
            str(binary),
            "--model", str(self.model_path),
            "--host", "127.0.0.1", "--port", str(self.port),
            "--parallel", str(self.slots),
            "--ctx-size", str(s.context_size * self.slots),  # each slot gets context_size
            "--threads", str(s.threads), "--threads-batch", str(s.threads),
            "--load-mode", "mmap+mlock",
            "--no-webui",
            "--jinja",  # the model's own chat template: what the OpenAI tools API needs
        ]  # fmt: skip

    @property
    def key_variable(self) -> str:
        """The environment variable the server reads its API key from."""
        return "LLAMA_API_KEY" if self.native else "API_KEY"

    def start(self) -> LlamaServer:
        # The same log file on a restart; the key in the environment, which its settings read.
        env = child_environment(**{self.key_variable: self.api_key})
        self._spawn(self.command(), self.log_path, "llama-server-", env=env)
        self._wait_ready(lambda: self.healthy(timeout=1), STARTUP_TIMEOUT_SECS, interval=0.2)
        return self

    def healthy(self, timeout: float = 2.0) -> bool:
        """Running and answering HTTP: a killed or wedged server is neither."""
        return self.alive() and models_answer(self.base_url, self.api_key, timeout)

    def restart(self) -> LlamaServer:
        """Replace a dead or wedged server with a fresh one on the same port (same base_url).

        Blocking, for seconds: call it off the event loop.
        """
        self.stop(keep_folder=True)
        return self.start()
