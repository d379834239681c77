"""A real `voice-agent serve` on a free loopback port, for the live-call tests.

``serving`` runs the command as a process, as a user would; ``serving_in_process`` runs its
``CallServer`` on a thread of the test process, so a test can look at its state.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from agent.live.call import Runtime
from agent.live.server import CallServer, serve_calls
from agent.net import free_port

T = TypeVar("T")

STARTUP_SECS = 300  # model loading on a busy 2-core machine


@dataclass
class Server:
    """The running server: its port, its calls folder and what it printed so far."""

    port: int
    calls_dir: Path
    process: subprocess.Popen
    stdout: list[str] = field(default_factory=list)
    stderr: list[str] = field(default_factory=list)

    def url(self, path: str, scheme: str = "ws") -> str:
        return f"{scheme}://127.0.0.1:{self.port}{path}"

    def calls(self, kind: str) -> list[Path]:
        return sorted(self.calls_dir.glob(f"*-{kind}-*"))

    def wait_for_line(self, text: str, timeout: float) -> str | None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.stdout):
                if text in line:
                    return line
            if self.process.poll() is not None:
                return None
            time.sleep(0.1)
        return None


def _collect(stream, lines: list[str]) -> None:
    for line in stream:
        lines.append(line.rstrip("\n"))


@contextmanager
def serving(calls_dir: Path, *flags: str, env: dict[str, str] | None = None) -> Iterator[Server]:
    """Start the server, wait until it listens, stop it with SIGINT and check it exited 0.

    The bot does not greet unless ``env`` sets ``VOICE_AGENT_LLM__GREETING``: the callers in
    these tests speak at once, and a greeting would be barged in on.
    """
    env = {"VOICE_AGENT_LLM__GREETING": "", **(os.environ if env is None else env)}
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "agent.cli", "serve", "--port", str(port),
         "--calls-dir", str(calls_dir), *flags],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    server = Server(port, calls_dir, process)
    for stream, lines in ((process.stdout, server.stdout), (process.stderr, server.stderr)):
        threading.Thread(target=_collect, args=(stream, lines), daemon=True).start()
    try:
        if server.wait_for_line("serving on", STARTUP_SECS) is None:
            raise RuntimeError("the server did not start:\n" + "\n".join(server.stderr[-20:]))
        yield server
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
        try:
            code = process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            code = process.wait()
    assert code == 0, "the server did not shut down cleanly:\n" + "\n".join(server.stderr[-20:])


@dataclass
class InProcessServer:
    """A ``CallServer`` serving on its own event loop in a thread of the test process.

    The tests can look inside it: its calls in progress, its connection count, the tasks
    on its loop.
    """

    server: CallServer
    port: int
    loop: asyncio.AbstractEventLoop
    lines: list[str] = field(default_factory=list)

    def url(self, path: str) -> str:
        return f"ws://127.0.0.1:{self.port}{path}"

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 30) -> T:
        """Run a coroutine on the server's loop and return its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def task_count(self) -> int:
        async def count() -> int:
            return len(asyncio.all_tasks())

        return self.run(count())

    def connections(self) -> int:
        return self.server.connections

    def calls(self, kind: str) -> list[Path]:
        return sorted(self.server.calls_dir.glob(f"*-{kind}-*"))


@contextmanager
def serving_in_process(
    runtime: Runtime, calls_dir: Path, **options: Any
) -> Iterator[InProcessServer]:
    """Serve ``runtime`` on a free loopback port until the block ends (every call hung up)."""
    loop = asyncio.new_event_loop()
    lines: list[str] = []
    server = CallServer(runtime, calls_dir, say=lines.append, **options)
    bound: list[int] = []
    ready = threading.Event()
    stop: list[asyncio.Event] = []

    async def main() -> None:
        stop.append(asyncio.Event())

        def on_ready(port: int) -> None:
            bound.append(port)
            ready.set()

        await serve_calls(server, "127.0.0.1", 0, stop=stop[0], on_ready=on_ready)

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    if not ready.wait(60):
        raise RuntimeError("the in-process server did not start")
    try:
        yield InProcessServer(server, bound[0], loop, lines)
    finally:
        loop.call_soon_threadsafe(stop[0].set)
        thread.join(60)
        loop.close()


async def wait_until(check: Callable[[], bool], timeout: float) -> bool:
    """Poll ``check`` every 0.1 s until it holds or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        await asyncio.sleep(0.1)
    return check()
