"""What the LLM servers the agent starts itself share: a random API key and a log file.

The key goes to the server in its environment (only its own user can read that, unlike a
command line), so other local users cannot use a server the agent started. The server's
output goes to a file, never to a pipe nobody reads (a full pipe stops the server).
"""

from __future__ import annotations

import secrets
import subprocess
import tempfile
from pathlib import Path
from typing import IO


def new_api_key() -> str:
    return secrets.token_urlsafe(32)


def auth_headers(api_key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"}


def open_log(path: Path | None, prefix: str) -> tuple[Path, IO[str]]:
    """The server's log file (in a new private temporary folder when ``path`` is None)."""
    if path is None:
        path = Path(tempfile.mkdtemp(prefix=prefix)) / "server.log"
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
    return path, path.open("w")


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
