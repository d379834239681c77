"""What the servers the agent starts itself share: a random API key, a log file, a wait
until the server answers, and a stop that leaves no process behind.

The key goes to the server in its environment (only its own user can read that, unlike a
command line), so other local users cannot use a server the agent started. The server's
output goes to a file, never to a pipe nobody reads (a full pipe stops the server). A server
inherits only what it needs of the agent's environment (``child_environment``): never the
serve token, the Twilio auth token or another service's key.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, Self

import httpx

from agent.errors import UserError

# What a server the agent starts inherits of its environment: where programs, libraries and
# temporary files are, the locale, and its own runtime's knobs (threads, GPUs, caches).
INHERITED = frozenset({"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "TZ", "TMPDIR",
                       "LD_LIBRARY_PATH", "VIRTUAL_ENV"})  # fmt: skip
INHERITED_PREFIXES = ("LC_", "XDG_", "OMP_", "MKL_", "OPENBLAS_", "GGML_", "LLAMA_ARG_",
                      "CUDA_", "NVIDIA_", "HF_", "VLLM_", "TORCH", "TRANSFORMERS_")  # fmt: skip


def child_environment(**own: str) -> dict[str, str]:
    """The environment of a server the agent starts: what it needs of ours, and ``own``."""
    kept = {k: v for k, v in os.environ.items()
            if k in INHERITED or k.startswith(INHERITED_PREFIXES)}  # fmt: skip
    return {**kept, **own}


def new_api_key() -> str:
    return secrets.token_urlsafe(32)


def auth_headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def models_answer(base_url: str, api_key: str | None, timeout: float) -> bool:
    """Whether an OpenAI-compatible server lists its models: it is up, loaded and takes the
    key, which is what an agent needs of it."""
    try:
        response = httpx.get(f"{base_url}/models", headers=auth_headers(api_key), timeout=timeout)
    except httpx.HTTPError:
        return False
    return response.status_code == 200


def terminate(proc: subprocess.Popen, timeout: float) -> None:
    """SIGTERM, then SIGKILL if it is still there after ``timeout`` s; reaped either way."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def last_log_line(path: Path | None) -> str:
    """The last non-empty line of a server's log, for a one-line error."""
    if path is None or not path.exists():
        return ""
    lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    return lines[-1].strip() if lines else ""


def wait_until_ready(
    proc: subprocess.Popen, ready: Callable[[], bool], *, name: str, timeout: float,
    interval: float, log_path: Path | None = None,
) -> None:  # fmt: skip
    """Poll ``ready`` until it holds, so a start fails in one line that says why: the
    process's last log line when it exits first."""
    where = f" (log: {log_path})" if log_path else ""
    deadline = time.monotonic() + timeout
    while not ready():
        if proc.poll() is not None:
            last = last_log_line(log_path) or f"exit status {proc.returncode}"
            raise UserError(f"{name} did not start: {last}{where}")
        if time.monotonic() > deadline:
            raise UserError(f"{name} did not answer within {timeout:g} s{where}")
        time.sleep(interval)


class LocalServer:
    """A server process the agent owns, its output in a log file; a context manager, so it
    is stopped however the code that started it ends."""

    name = "the server"  # for its one-line errors
    stop_timeout_secs = 10.0

    def __init__(self) -> None:
        self.log_path: Path | None = None
        self._log_file: IO[str] | None = None
        self._proc: subprocess.Popen | None = None
        self._scratch: Path | None = None  # a private folder of ours, removed at a clean stop

    def start(self) -> Self:
        raise NotImplementedError

    def _private_folder(self, prefix: str) -> Path:
        """A new temporary folder only this user can read, gone when the server stops
        cleanly and kept, with its log, when the server failed."""
        self._scratch = Path(tempfile.mkdtemp(prefix=prefix))
        return self._scratch

    def _spawn(
        self, cmd: list[str], log: Path | None, prefix: str, env: dict[str, str], **popen: Any
    ) -> None:
        """``log``: the server's log file (in a private folder when None); ``env``: its whole
        environment (``child_environment``)."""
        if log is None:
            log = self._private_folder(prefix) / "server.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        self.log_path, self._log_file = log, log.open("w")
        self._proc = subprocess.Popen(cmd, stdout=self._log_file, stderr=subprocess.STDOUT,
                                      env=env, **popen)  # fmt: skip

    def _wait_ready(self, ready: Callable[[], bool], timeout: float, interval: float) -> None:
        """Until ``ready`` holds; stopped, and one UserError line, if it never does."""
        assert self._proc is not None, "not started"
        try:
            wait_until_ready(self._proc, ready, name=self.name, timeout=timeout,
                             interval=interval, log_path=self.log_path)  # fmt: skip
        except UserError:
            self._scratch = None  # the error names the log: keep it
            self.stop()
            raise

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def returncode(self) -> int | None:
        """How the process ended (negative: the signal); None while it runs."""
        return self._proc.poll() if self._proc is not None else None

    def _terminate(self, proc: subprocess.Popen) -> None:
        terminate(proc, timeout=self.stop_timeout_secs)

    def stop(self, *, keep_folder: bool = False) -> None:
        """``keep_folder``: a restart follows, in the same private folder."""
        proc, self._proc = self._proc, None
        failed = proc is not None and proc.poll() is not None  # it ended before we stopped it
        if proc is not None:
            self._terminate(proc)
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        if self._scratch is not None and not failed and not keep_folder:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
