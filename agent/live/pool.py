"""``voice-agent pool``: N ``voice-agent serve`` workers behind one HAProxy address, sharing one
llama.cpp server.

One box serves more calls at once by running more worker processes (each with its own
recognition and synthesis, optionally pinned to its own CPUs with taskset) instead of more
calls per process, while the LLM stays loaded once: the workers use it as an
OpenAI-compatible URL with its key (``llm.engine: openai``). Workers listen on loopback
ports; only HAProxy listens on the pool's address. Calls come through a proxy, so a serve
token is required (``docs/security.md``). A worker that exits is started again: SIGTERM one
worker to restart it without cutting its calls off (it drains first). So is the LLM server,
on the same port with the same key, waiting longer after each start that fails (its old
process reaped, never left a zombie); meanwhile the workers' ``/readyz`` says 503. SIGTERM to
the pool drains every worker, then stops HAProxy and the LLM server.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from agent import model_store
from agent.errors import UserError
from agent.live.haproxy import Haproxy, haproxy_binary
from agent.live.health import HEALTHZ, READYZ
from agent.llm.servers.llama import LlamaServer, native_server
from agent.llm.servers.local import wait_until_ready
from agent.net import free_port
from agent.settings import LLMSettings, Settings

STARTUP_TIMEOUT_SECS = 300  # model loading on a busy 2-core machine
# Waits before starting the LLM server again after a start that failed: doubling up to this.
LLM_RETRY_MAX_SECS = 60.0
EXIT_MARGIN_SECS = 60  # past the drain limit: writing the last calls' files, unloading models


def parse_cpus(spec: str) -> set[int]:
    """A taskset CPU list (``0``, ``0-1``, ``0,2``) as CPU numbers, each one on this machine."""
    available = os.sched_getaffinity(0)
    cpus: set[int] = set()
    try:
        for part in spec.split(","):
            first, _, last = part.partition("-")
            cpus |= set(range(int(first), int(last or first) + 1))
    except ValueError:
        raise UserError(f"--cpus {spec!r} is not a CPU list like 0 or 0-1 or 0,2") from None
    if not cpus or not cpus <= available:
        raise UserError(f"--cpus {spec!r}: this machine lets us use CPUs "
                        f"{','.join(map(str, sorted(available)))}")  # fmt: skip
    return cpus


@dataclass
class Worker:
    """One ``voice-agent serve`` on a loopback port, with its own calls folder."""

    index: int
    port: int
    calls_dir: Path
    env: dict[str, str]
    cpus: str | None = None
    config: Path | None = None  # the pool's --config: the worker reads the same file
    process: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        """Its server name in HAProxy's configuration."""
        return f"w{self.index}"

    def url(self, path: str, scheme: str = "http") -> str:
        return f"{scheme}://127.0.0.1:{self.port}{path}"

    def command(self) -> list[str]:
        pin = ["taskset", "-c", self.cpus] if self.cpus else []
        config = ["--config", str(self.config)] if self.config else []
        return [*pin, sys.executable, "-m", "agent.cli", "serve", "--port", str(self.port),
                "--calls-dir", str(self.calls_dir), *config]  # fmt: skip

    def start(self) -> None:
        # Its own session: a Ctrl-C meant for the pool reaches the worker as a drain.
        self.process = subprocess.Popen(self.command(), env=self.env, start_new_session=True)

    def probe(self, path: str = READYZ) -> int | None:
        """The status of a probe (``/healthz``, ``/readyz``); None when nothing answers."""
        try:
            return httpx.get(self.url(path), timeout=2).status_code
        except httpx.HTTPError:
            return None

    def wait_healthy(self, timeout: float = STARTUP_TIMEOUT_SECS) -> None:
        assert self.process is not None, "not started"
        wait_until_ready(self.process, lambda: self.probe(HEALTHZ) == 200,
                         name=f"worker {self.index}", timeout=timeout, interval=0.5)  # fmt: skip


class Pool:
    """The LLM server, the workers and HAProxy, started in that order, stopped in reverse."""

    def __init__(
        self,
        settings: Settings,
        *,
        workers: int,
        host: str,
        port: int,
        calls_dir: Path,
        cpus: list[str] | None = None,
        config: Path | None = None,
        say: Callable[[str], None] = print,
    ) -> None:
        if workers < 1:
            raise UserError("--workers must be at least 1")
        if settings.serve.token is None:
            raise UserError("the pool needs a serve token (its workers are reached through "
                            "HAProxy, a proxy): set VOICE_AGENT_SERVE__TOKEN")  # fmt: skip
        for spec in cpus or ():
            parse_cpus(spec)
        if cpus and shutil.which("taskset") is None:
            raise UserError("taskset not found (util-linux): install it or leave out --cpus")
        haproxy_binary()  # before minutes of model loading
        self.settings = settings
        self.host, self.port = host, port
        self.say = say
        gguf = model_store.resolve(settings.llm.model, "llm", settings.models_dir)
        self.llm = LlamaServer(gguf, self.llm_settings(settings, workers, say))
        env = {**os.environ, "VOICE_AGENT_LLM__ENGINE": "openai",
               "VOICE_AGENT_LLM__BASE_URL": self.llm.base_url,
               "VOICE_AGENT_LLM__BASE_URL_SERVER": "llama-server",  # sends repeat_penalty
               "VOICE_AGENT_LLM__API_KEY": self.llm.api_key,
               "VOICE_AGENT_LLM__MODEL": gguf.stem,
               "VOICE_AGENT_SERVE__TOKEN": settings.serve.token.get_secret_value(),
               "VOICE_AGENT_SERVE__MAX_CALLS": str(settings.serve.max_calls),
               "VOICE_AGENT_SERVE__MAX_CALLS_PER_ADDRESS": str(
                   settings.serve.max_calls_per_address),
               "VOICE_AGENT_SERVE__DRAIN_SECS": str(settings.serve.drain_secs)}  # fmt: skip
        self.workers = [
            Worker(i, free_port(), calls_dir / f"worker-{i}", env,
                   cpus[i % len(cpus)] if cpus else None, config)
            for i in range(workers)
        ]  # fmt: skip
        for worker in self.workers:
            if worker.cpus:  # as many synthesis threads as its CPUs, recognition's at most
                count = len(parse_cpus(worker.cpus))
                asr = min(count, settings.asr.threads)
                worker.env = {"VOICE_AGENT_ASR__THREADS": str(asr),
                              "VOICE_AGENT_TTS__THREADS": str(count), **env}  # fmt: skip
        self._llm_retry_at = 0.0  # when the LLM server may be started again (monotonic)
        self._llm_backoff = 1.0
        self.haproxy = Haproxy(host, port, [w.port for w in self.workers],
                               max_call_secs=settings.serve.max_call_secs,
                               max_per_address=settings.serve.max_calls_per_address)  # fmt: skip

    @staticmethod
    def llm_settings(settings: Settings, workers: int, say: Callable[[str], None]) -> LLMSettings:
        """The shared server's settings: one slot per call the pool admits
        (``serve.max_calls`` per worker) unless set, where llama.cpp's own server is
        installed (without it, answers queue at one slot). One worker with two calls needs
        two slots as much as two workers with one call each."""
        if settings.llm.server_slots is not None:
            return settings.llm
        calls = workers * settings.serve.max_calls
        slots = calls if native_server() is not None else 1
        if slots < calls:
            say(
                "note: llama.cpp's own llama-server is not installed, so the workers' "
                "answers take turns at one LLM slot (bash scripts/setup.sh --pool installs it)"
            )
        return settings.llm.model_copy(update={"server_slots": slots})

    def __enter__(self) -> Pool:
        try:
            self.say(f"starting the LLM server and {len(self.workers)} worker(s)…")
            self.llm.start()
            for worker in self.workers:
                worker.start()
            for worker in self.workers:
                worker.wait_healthy()
            self.haproxy.start()
            self.haproxy.wait_up([w.name for w in self.workers], timeout=30)
        except BaseException:
            self.__exit__()
            raise
        ports = ", ".join(str(w.port) for w in self.workers)
        self.say(f"pool serving on ws://{self.host}:{self.port}/phone (workers on 127.0.0.1 "
                 f"ports {ports}, LLM at {self.llm.base_url}, "
                 f"{self.llm.slots} slot(s))")  # fmt: skip
        return self

    def run(self, stopping: threading.Event, every_secs: float = 1.0) -> None:
        """Keep the pool serving until ``stopping`` is set (``supervise`` every second)."""
        while not stopping.wait(every_secs):
            self.supervise()

    def supervise(self) -> None:
        """Start again what has exited: the LLM server, then the workers."""
        self.restart_llm()
        self.restart_exited()

    def restart_llm(self) -> None:
        """Start the shared LLM server again if it has exited (killed, crashed): on its own
        port with its own key, which the workers know; one line each time. A start that
        fails is tried again after 1, 2, 4... s (at most ``LLM_RETRY_MAX_SECS``)."""
        if self.llm.alive() or time.monotonic() < self._llm_retry_at:  # alive() reaps it
            return
        code = self.llm.returncode
        self.llm.stop(keep_folder=True)  # the old process reaped, its log kept
        self.say(f"the LLM server exited (status {code}): starting it again")
        began = time.monotonic()
        try:
            self.llm.start()
        except UserError as exc:
            self._llm_retry_at = time.monotonic() + self._llm_backoff
            self.say(f"the LLM server did not start ({exc}): trying again in "
                     f"{self._llm_backoff:g} s")  # fmt: skip
            self._llm_backoff = min(self._llm_backoff * 2, LLM_RETRY_MAX_SECS)
            return
        self._llm_backoff = 1.0
        self.say(f"the LLM server answers again ({time.monotonic() - began:.1f} s to start)")

    def restart_exited(self) -> None:
        """Start again each worker that has exited (drained after a SIGTERM, or died)."""
        for worker in self.workers:
            if worker.process is not None and worker.process.poll() is not None:
                self.say(f"worker {worker.index} exited with status "
                         f"{worker.process.returncode}: starting it again")  # fmt: skip
                worker.start()

    def __exit__(self, *exc: object) -> None:
        """Drain every worker (SIGTERM), then stop HAProxy and the LLM server."""
        running = [w.process for w in self.workers if w.process and w.process.poll() is None]
        for process in running:
            process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.settings.serve.drain_secs + EXIT_MARGIN_SECS
        for process in running:
            try:
                process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.haproxy.stop()
        self.llm.stop()
