"""The LLM stage: one OpenAI-compatible streaming client for every engine.

Each ``LLMContextFrame`` starts one streamed chat completion. Tokens go downstream as
``LLMTextFrame`` the moment they arrive. An interruption cancels the task, which closes the
HTTP stream, so the engine stops decoding. An engine error or timeout speaks a short
fallback sentence and records the error in the turn; the call goes on.
"""

from __future__ import annotations

import asyncio
import statistics
import time

import openai
from pipecat.frames.frames import (
    CancelFrame,
    EndFrame,
    Frame,
    InterruptionFrame,
    LLMContextFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    StartFrame,
)
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor

from agent.clock import CallClock
from agent.frames import LLMUsageFrame, TimelineEventFrame
from agent.llm.prompt import prompt_messages
from agent.settings import LLMSettings

FALLBACK = "Sorry, I lost my train of thought. Could you say that again?"


class OpenAIStreamingLLM(FrameProcessor):
    """Streams chat completions from any OpenAI-compatible server (llama.cpp, vLLM)."""

    def __init__(self, base_url: str, model: str, settings: LLMSettings, clock: CallClock) -> None:
        super().__init__()
        self._settings = settings
        self._model = model
        self._clock = clock
        self._client = openai.AsyncOpenAI(
            base_url=base_url, api_key=settings.api_key, timeout=settings.timeout_secs,
            max_retries=0,
        )  # fmt: skip
        self._task: asyncio.Task | None = None
        self._last_request = time.monotonic()
        self._keepalive: asyncio.Task | None = None

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, StartFrame):
            self._keepalive = self.create_task(self._keep_warm())
        if isinstance(frame, LLMContextFrame):
            await self._cancel()
            messages = list(frame.context.get_messages())
            self._task = self.create_task(self._answer(messages))
            return
        if isinstance(frame, InterruptionFrame | EndFrame | CancelFrame):
            await self._cancel()
        if isinstance(frame, EndFrame | CancelFrame) and self._keepalive is not None:
            await self.cancel_task(self._keepalive)
            self._keepalive = None
        await self.push_frame(frame, direction)

    async def _complete_quietly(self) -> None:
        """A one-token request on the static prefix: prefills (or keeps warm) its KV cache."""
        messages = [
            {"role": "system", "content": self._settings.system_prompt},
            {"role": "user", "content": "Hello."},
        ]
        try:
            await self._client.chat.completions.create(
                model=self._model, messages=messages, max_tokens=1, temperature=0
            )
        except openai.OpenAIError:
            pass
        self._last_request = time.monotonic()

    async def _keep_warm(self) -> None:
        """Pre-warm at call start, then touch the engine when idle so its pages stay resident."""
        await self._complete_quietly()
        while self._settings.keepalive_secs > 0:
            await asyncio.sleep(self._settings.keepalive_secs)
            idle = time.monotonic() - self._last_request
            if idle >= self._settings.keepalive_secs and self._task is None:
                await self._complete_quietly()

    async def _cancel(self) -> None:
        if self._task is not None:
            await self.cancel_task(self._task)
            self._task = None

    async def _answer(self, history: list[dict]) -> None:
        s = self._settings
        messages = prompt_messages(s.system_prompt, history, s.history_turns)
        await self.push_frame(LLMFullResponseStartFrame())
        await self.push_frame(TimelineEventFrame(event="llm_request", at_ms=self._clock.now_ms()))
        self._last_request = time.monotonic()
        arrivals: list[float] = []
        usage = None
        error = None
        try:
            stream = await self._client.chat.completions.create(
                model=self._model,
                messages=messages,
                max_tokens=s.max_tokens,
                temperature=s.temperature,
                stream=True,
                stream_options={"include_usage": True},
            )
            async with stream:
                async for chunk in stream:
                    if chunk.usage is not None:
                        usage = chunk.usage
                    if not chunk.choices or not chunk.choices[0].delta.content:
                        continue
                    arrivals.append(time.monotonic())
                    await self.push_frame(LLMTextFrame(text=chunk.choices[0].delta.content))
        except (openai.OpenAIError, TimeoutError) as exc:
            error = f"llm: {type(exc).__name__}: {str(exc)[:200]}"
            await self.push_frame(LLMTextFrame(text=FALLBACK))
        finally:
            self._last_request = time.monotonic()
            self._task = None
        gaps = [1000 * (b - a) for a, b in zip(arrivals, arrivals[1:], strict=False)]
        details = getattr(usage, "prompt_tokens_details", None) if usage else None
        await self.push_frame(
            LLMUsageFrame(
                prompt_tokens=usage.prompt_tokens if usage else None,
                cached_tokens=getattr(details, "cached_tokens", None),
                completion_tokens=usage.completion_tokens if usage else len(arrivals),
                itl_ms=round(statistics.median(gaps), 1) if gaps else None,
                error=error,
            )
        )
        await self.push_frame(LLMFullResponseEndFrame())
