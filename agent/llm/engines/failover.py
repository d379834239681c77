"""What happens after the LLM engine fails: restart the embedded server, or fail over.

The LLM stage already turns a failed answer into a short apology and records the error in
the turn. What it cannot do is make the *next* answer work, and that depends on the
deployment, so the policy lives here, in one ``ChatEngine`` wrapper:

- an answer that fails before its first token is retried at once on the fallback URL
  (``llm.fallback_url``), so the caller hears a normal answer;
- an answer that fails part-way is lost (the stage apologises); the error it raises says
  what was done about the failure, so the turn record tells the whole story;
- the embedded llama.cpp server (engine ``llama-server``) is restarted when a failure
  leaves it dead or not answering: once, however many calls saw the failure, off the event
  loop. Answers meanwhile go to the fallback, or wait for the restart;
- a failed primary URL (no server to restart) is skipped for ``RETRY_PRIMARY_SECS`` while a
  fallback serves, then tried again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from loguru import logger

from agent.errors import error_line
from agent.llm.engines.chat import GREEDY, ChatEngine, OpenAIChatEngine, Sampling, Usage
from agent.llm.servers.llama import LlamaServer
from agent.settings import LLMSettings
from agent.tools.runner import ToolCall

RETRY_PRIMARY_SECS = 30.0


class EngineFailure(RuntimeError):
    """An engine failed; the message says how and what the failover did about it."""


class FailoverEngine:
    """A primary engine, optionally an embedded server to restart and a fallback engine."""

    def __init__(
        self,
        primary: ChatEngine,
        *,
        server: LlamaServer | None = None,
        fallback: ChatEngine | None = None,
        retry_primary_secs: float = RETRY_PRIMARY_SECS,
    ) -> None:
        self.primary = primary
        self.server = server
        self.fallback = fallback
        self.name = "llama-server" if server is not None else primary.name
        self.needs_keepalive = primary.needs_keepalive
        self.tools = primary.tools
        self._retry_primary_secs = retry_primary_secs
        self._primary_down_until = 0.0
        # One thread restarts the server; the pending restart is a concurrent Future, so
        # calls on any event loop can wait for it.
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="llm-restart")
        self._restarting: Future[Any] | None = None
        self.restarts = 0

    # -- which engine answers -----------------------------------------------------------------

    def _restart_server(self) -> Future[Any]:
        """Start a restart of the embedded server unless one is running; returns it."""
        assert self.server is not None
        if self._restarting is None or self._restarting.done():
            logger.warning("llm: restarting the llama.cpp server on port {}", self.server.port)
            self._restarting = self._executor.submit(self._do_restart)
        return self._restarting

    def _do_restart(self) -> None:
        assert self.server is not None
        self.server.restart()
        self.restarts += 1
        logger.info("llm: the llama.cpp server is back (restart {})", self.restarts)

    async def _pick(self) -> tuple[ChatEngine, bool]:
        """The engine for the next answer, and whether it is the fallback."""
        if self.server is not None and not self.server.alive():
            self._restart_server()  # it died while idle: restart before it fails a turn
        restarting = self._restarting is not None and not self._restarting.done()
        if self.fallback is not None and (
            restarting or time.monotonic() < self._primary_down_until
        ):
            return self.fallback, True
        if restarting:
            assert self._restarting is not None
            try:
                await asyncio.wrap_future(self._restarting)
            except Exception as exc:  # noqa: BLE001 - any start failure, told in one line
                raise EngineFailure(
                    f"the llama.cpp server could not be restarted: {error_line(exc)}"
                ) from exc
        return self.primary, False

    async def _after_failure(self, exc: BaseException, on_fallback: bool) -> str:
        """Act on a failure; returns what was done, for the error line."""
        if on_fallback:
            return "the fallback failed too"
        if self.server is not None:
            if await asyncio.to_thread(self.server.healthy):
                return "the llama.cpp server is still up"
            self._restart_server()
            return "restarting the llama.cpp server"
        if self.fallback is not None:
            self._primary_down_until = time.monotonic() + self._retry_primary_secs
            return "failing over to the fallback URL"
        return "no fallback configured"

    # -- ChatEngine -----------------------------------------------------------------------------

    async def stream(
        self,
        messages: list[dict[str, Any]],
        *,
        max_tokens: int,
        sampling: Sampling = GREEDY,
        calls: bool = True,
    ) -> AsyncIterator[str | Usage | ToolCall]:
        engine, on_fallback = await self._pick()
        started = False
        try:
            async for item in engine.stream(
                messages, max_tokens=max_tokens, sampling=sampling, calls=calls
            ):
                started = started or isinstance(item, str)
                yield item
            return
        except Exception as exc:  # noqa: BLE001 - any engine failure (httpx, openai, OS)
            action = await self._after_failure(exc, on_fallback)
            logger.warning("llm: {} failed: {}; {}", "fallback" if on_fallback else self.name,
                           error_line(exc), action)  # fmt: skip
            if started or on_fallback or self.fallback is None:
                raise EngineFailure(f"{error_line(exc)}; {action}") from exc
        # Nothing was said yet: the fallback answers this very turn.
        assert self.fallback is not None
        async for item in self.fallback.stream(
            messages, max_tokens=max_tokens, sampling=sampling, calls=calls
        ):
            yield item

    async def prefill(self, messages: list[dict[str, Any]]) -> None:
        await self.primary.prefill(messages)

    def pause_decoding(self, paused: bool) -> None:
        self.primary.pause_decoding(paused)

    async def end_of_message(self, messages: list[dict[str, Any]]) -> float | None:
        return await self.primary.end_of_message(messages)

    def close(self) -> None:
        self._executor.shutdown(wait=True)


def failover_engine(
    primary: ChatEngine, settings: LLMSettings, *, server: LlamaServer | None = None
) -> ChatEngine:
    """``primary`` wrapped in the failover policy, or unchanged when there is none to apply."""
    if server is None and not settings.fallback_url:
        return primary
    fallback = None
    if settings.fallback_url:
        model = settings.fallback_model or getattr(primary, "model", settings.model)
        fallback = OpenAIChatEngine(settings.fallback_url, model, settings, tools=primary.tools)
    return FailoverEngine(primary, server=server, fallback=fallback)
