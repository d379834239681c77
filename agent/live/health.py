"""The load balancer's questions to a worker: is it alive (``/healthz``), can it take a call
now (``/readyz``).

Both are answered on the HTTP request, before the access checks: a balancer's probe carries
no token and may send any Host. So they say one fixed word and nothing else (no count, no
version, no address): ``ok``, ``ready``, ``full`` or ``draining``, which a refused call
learns anyway.
"""

from __future__ import annotations

from http import HTTPStatus

HEALTHZ, READYZ = "/healthz", "/readyz"
PROBES = (HEALTHZ, READYZ)
# What a refused caller (or balancer) is told to wait before trying again, in seconds.
RETRY_AFTER_SECS = 5


def probe(route: str, *, full: bool, draining: bool) -> tuple[HTTPStatus, str]:
    """The status and word answering ``route`` (one of ``PROBES``)."""
    if route == HEALTHZ:
        return HTTPStatus.OK, "ok"
    if draining:
        return HTTPStatus.SERVICE_UNAVAILABLE, "draining"
    if full:
        return HTTPStatus.SERVICE_UNAVAILABLE, "full"
    return HTTPStatus.OK, "ready"
