"""A real `voice-agent serve` process on a free loopback port, for the live-call tests."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

STARTUP_SECS = 300  # model loading on a busy 2-core machine


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
    """Start the server, wait until it listens, stop it with SIGINT and check it exited 0."""
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
