"""A server the agent starts keeps its log in a private folder: gone after a clean stop,
kept when the server died or never came up (the error names the log)."""

from __future__ import annotations

import sys

import pytest

from agent.errors import UserError
from agent.llm.servers.local import LocalServer, child_environment


class PythonServer(LocalServer):
    """A real process standing in for llama-server: it runs ``code`` until stopped, and
    a restart logs to the same file, as llama-server's does."""

    name = "the python server"
    stop_timeout_secs = 2.0

    def __init__(self, code: str, ready: bool = True) -> None:
        super().__init__()
        self._code, self._ready = code, ready

    def start(self) -> PythonServer:
        self._spawn([sys.executable, "-c", self._code], self.log_path, "test-server-",
                    env=child_environment())  # fmt: skip
        self._wait_ready(lambda: self._ready, timeout=0.5, interval=0.05)
        return self


def test_a_clean_stop_removes_the_folder_and_a_restart_keeps_it():
    server = PythonServer("import time; print('up', flush=True); time.sleep(60)").start()
    assert server.log_path is not None
    folder = server.log_path.parent
    assert folder.stat().st_mode & 0o077 == 0  # only this user
    server.stop(keep_folder=True)
    server.start()
    assert server.log_path.parent == folder
    server.stop()
    assert not folder.exists()


def test_a_server_that_died_keeps_its_log():
    server = PythonServer("print('bad model file', flush=True)").start()
    assert server.log_path is not None
    server._proc.wait(timeout=10)  # type: ignore[union-attr]
    server.stop()
    assert "bad model file" in server.log_path.read_text()


def test_a_server_that_never_came_up_keeps_the_log_its_error_names():
    server = PythonServer("import time; time.sleep(60)", ready=False)
    with pytest.raises(UserError):
        server.start()
    assert server.log_path is not None and server.log_path.is_file()
