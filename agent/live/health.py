"""The load balancer's questions to a worker: is it alive (``/healthz``), can it take a call
now (``/readyz``).

Both are answered on the HTTP request, before the access checks: a balancer's probe carries
no token and may send any Host. So they say one fixed word and nothing else (no count, no
version, no address): ``ok``, ``ready``, ``full``, ``draining`` or ``down`` (the LLM server
the calls need does not answer: a call would hear nothing but apologies), which a refused
call learns anyway.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from http import HTTPStatus

from loguru import logger

HEALTHZ, READYZ = "/healthz", "/readyz"
PROBES = (HEALTHZ, READYZ)
# What a refused caller (or balancer) is told to wait before trying again, in seconds.
RETRY_AFTER_SECS = 5


def probe(
    route: str, *, full: bool, draining: bool, llm_down: bool = False
) -> tuple[HTTPStatus, str]:
    """The status and word answering ``route`` (one of ``PROBES``)."""
    if route == HEALTHZ:
        return HTTPStatus.OK, "ok"
    if draining:
        return HTTPStatus.SERVICE_UNAVAILABLE, "draining"
    if llm_down:
        return HTTPStatus.SERVICE_UNAVAILABLE, "down"
    if full:
        return HTTPStatus.SERVICE_UNAVAILABLE, "full"
    return HTTPStatus.OK, "ready"


class LLMWatch:
    """Whether the LLM server the calls use answers, asked every ``every_secs`` (``answers``
    runs off the event loop): while it does not, ``/readyz`` says 503 and no balancer sends
    a call here. One line each time that changes."""

    def __init__(self, answers: Callable[[], bool], name: str, every_secs: float = 1.0) -> None:
        self._answers = answers
        self._name = name
        self._every = every_secs
        self.down = False

    async def run(self) -> None:
        while True:
            down = not await asyncio.to_thread(self._answers)
            if down != self.down:
                if down:
                    logger.warning("{} does not answer: /readyz says 503 until it does", self._name)
                else:
                    logger.info("{} answers again: /readyz says 200", self._name)
                self.down = down
            await asyncio.sleep(self._every)
