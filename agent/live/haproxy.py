"""HAProxy in front of a pool of ``voice-agent serve`` workers: its configuration and process.

A call is one long websocket, so the next call goes to the worker with the fewest
(``balance leastconn``); a worker is sent new calls only while its ``/readyz`` says 200 (a
full or draining worker keeps the calls it has); an upgrade refused with 503 or a refused
connection (a worker that filled up, began draining or died between two checks) is tried on
another worker; the tunnel outlives the longest call. When no worker can take a call, the
caller gets HAProxy's own 503 with the workers' ``Retry-After``. Each worker counts the
connections per caller address, but a caller could hold that many on every worker: HAProxy
counts them across the pool (a stick table of connections per source address) and refuses
the next with 503. Its stats socket (owner
only) tells which workers it sends calls to: ``echo "show stat" | socat - <socket>``.
"""

from __future__ import annotations

import csv
import shutil
import socket
import time
from pathlib import Path

from agent.errors import UserError
from agent.live.health import READYZ, RETRY_AFTER_SECS
from agent.llm.servers.local import LocalServer, child_environment

STARTUP_TIMEOUT_SECS = 10.0
CHECK_INTERVAL = "1s"
BUSY = "busy: no worker can take a call now, try again later"
PER_ADDRESS = "busy: too many calls from your address already, try again later"


def haproxy_config(
    host: str,
    port: int,
    workers: list[int],
    *,
    max_call_secs: float,
    max_per_address: int,
    stats_socket: Path,
) -> str:
    """The configuration: one frontend on ``host:port``, one backend of loopback ``workers``
    (named ``w0``, ``w1``...), at most ``max_per_address`` connections from one address."""
    servers = "\n".join(f"    server w{i} 127.0.0.1:{p}" for i, p in enumerate(workers))
    tunnel = int(max_call_secs) + 60
    too_many = (
        f'http-request deny deny_status 503 content-type text/plain string "{PER_ADDRESS}" '
        f"hdr Retry-After {RETRY_AFTER_SECS} if {{ sc0_conn_cur gt {max_per_address} }}"
    )
    return f"""\
global
    maxconn 4096
    stats socket {stats_socket} mode 600 level user

defaults
    mode http
    timeout connect 5s
    timeout http-request 10s
    timeout client 30s
    timeout server 30s
    timeout client-fin 5s
    timeout server-fin 5s
    timeout tunnel {tunnel}s
    retries 3
    option redispatch 1
    retry-on conn-failure empty-response 503

frontend calls
    bind {host}:{port}
    http-error status 503 content-type text/plain string "{BUSY}" hdr Retry-After {RETRY_AFTER_SECS}
    # Connections per caller address across every worker (each worker counts its own only).
    stick-table type ipv6 size 100k expire 60s store conn_cur
    tcp-request connection track-sc0 src
    # One X-Forwarded-For, the caller's address: `option forwardfor` appends a second header
    # to one the caller sent, and the worker refuses a header it reads twice (400).
    http-request set-header X-Forwarded-For %[src]
    {too_many}
    default_backend workers

backend workers
    balance leastconn
    option httpchk
    http-check send meth GET uri {READYZ} ver HTTP/1.1 hdr Host localhost
    http-check expect status 200
    default-server check inter {CHECK_INTERVAL} fall 1 rise 1
{servers}
"""


def haproxy_binary() -> str:
    found = shutil.which("haproxy")
    if found is None:
        raise UserError(
            "haproxy not found: install it (apt-get install haproxy, or "
            "`bash scripts/setup.sh --pool` on Debian as root)"
        )
    return found


class Haproxy(LocalServer):
    """An HAProxy process in the foreground, its config and log in a private folder."""

    def __init__(
        self,
        host: str,
        port: int,
        workers: list[int],
        *,
        max_call_secs: float,
        max_per_address: int,
    ):
        super().__init__()
        self.host, self.port = host, port
        self.name = f"haproxy on {host}:{port}"
        self._workers = workers
        self._max_call_secs = max_call_secs
        self._max_per_address = max_per_address

    def start(self) -> Haproxy:
        binary = haproxy_binary()
        folder = self._private_folder("haproxy-")  # private: the stats socket is here
        config = folder / "haproxy.cfg"
        config.write_text(haproxy_config(self.host, self.port, self._workers,
                                         max_call_secs=self._max_call_secs,
                                         max_per_address=self._max_per_address,
                                         stats_socket=folder / "haproxy.sock"))  # fmt: skip
        self._spawn([binary, "-db", "-f", str(config)], folder / "server.log", "haproxy-",
                    env=child_environment(), start_new_session=True)  # fmt: skip
        self._wait_ready(self._listening, STARTUP_TIMEOUT_SECS, interval=0.1)
        return self

    def _listening(self) -> bool:
        try:
            socket.create_connection((self.host, self.port), timeout=1).close()
        except OSError:
            return False
        return True

    @property
    def stats_socket(self) -> Path:
        assert self.log_path is not None, "not started"
        return self.log_path.with_name("haproxy.sock")

    def states(self) -> dict[str, str]:
        """Each worker's state as HAProxy sees it (``w0``: ``UP``, ``DOWN``, ...)."""
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(str(self.stats_socket))
            s.sendall(b"show stat\n")
            text = b"".join(iter(lambda: s.recv(65536), b"")).decode()
        rows = csv.DictReader(text.removeprefix("# ").splitlines())
        return {row["svname"]: row["status"] for row in rows if row["pxname"] == "workers"
                and row["svname"] not in ("FRONTEND", "BACKEND")}  # fmt: skip

    def wait_up(self, names: list[str], timeout: float) -> None:
        """Until HAProxy sends calls to each of ``names`` (its checks pass)."""
        deadline = time.monotonic() + timeout
        while not all(self.states().get(name) == "UP" for name in names):
            if time.monotonic() > deadline:
                raise UserError(f"haproxy does not see the workers up: {self.states()}")
            time.sleep(0.2)
