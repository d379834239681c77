"""A server's HTTP side without a socket: requests as a client sends them, and the part of a
websockets connection that ``process_request`` uses."""

from __future__ import annotations

import asyncio
import base64
import os
import socket
from http import HTTPStatus

from websockets.datastructures import Headers
from websockets.http11 import Request, Response

TOKEN = "test-token-0123456789abcdef"
PORT = 8765
OWN = f"127.0.0.1:{PORT}"


def request(path: str, **headers: str) -> Request:
    """An upgrade or page request as a client sends it (Host defaults to the server's)."""
    all_headers = Headers(Host=OWN)
    for name, value in headers.items():
        name = name.replace("_", "-")
        if name in all_headers:
            del all_headers[name]
        all_headers[name] = value
    return Request(path, all_headers)


class FakeConnection:
    """What ``process_request`` uses of a websockets ServerConnection."""

    def __init__(self, host: str) -> None:
        self.remote_address = (host, 40000)
        loop = asyncio.get_running_loop()
        self.connection_lost_waiter: asyncio.Future[None] = loop.create_future()

    def respond(self, status: HTTPStatus, text: str) -> Response:
        body = text.encode()  # with the headers websockets' own respond() sets
        headers = Headers([("Content-Length", str(len(body))),
                           ("Content-Type", "text/plain; charset=utf-8")])  # fmt: skip
        return Response(status.value, status.phrase, headers, body)


def raw_request(
    port: int, path: str, headers: list[tuple[str, str]], *, upgrade: bool = True
) -> tuple[int, bytes]:
    """Send one request as written (headers in order, repeats kept, Host as given) to a server
    on loopback; return its status and the raw response head and body read so far."""
    status, head, sock = held_request(port, path, headers, upgrade=upgrade)
    sock.close()
    return status, head


def held_request(
    port: int,
    path: str,
    headers: list[tuple[str, str]],
    *,
    upgrade: bool = True,
    source: str = "127.0.0.1",
) -> tuple[int, bytes, socket.socket]:
    """``raw_request`` from the loopback address ``source`` (127.0.0.2 is another caller),
    leaving the socket open: an upgraded one holds its connection until closed."""
    lines = [f"GET {path} HTTP/1.1"]
    if not any(name.lower() == "host" for name, _ in headers):
        lines.append(f"Host: 127.0.0.1:{port}")
    if upgrade:
        lines += ["Upgrade: websocket", "Connection: Upgrade", "Sec-WebSocket-Version: 13",
                  f"Sec-WebSocket-Key: {base64.b64encode(os.urandom(16)).decode()}"]  # fmt: skip
    lines += [f"{name}: {value}" for name, value in headers]
    sock = socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(source, 0))
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    status = int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/1.1 ") else 0
    return status, data, sock
