"""Stand-ins for the chat engine and the voice: scripted tokens and audio, with delays and
faults, so the stages' behaviour is tested in milliseconds without loading a model."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

import numpy as np

from agent.llm.engines import Usage

ANSWER = ("The", " capital", " of", " France", " is", " Paris.", " It", " is", " lovely.")


class ScriptedEngine:
    """A chat engine that answers every request with the same tokens, at a set pace.

    It records what it was asked, how many tokens it decoded and when it was paused;
    ``fail_after`` tokens into an answer it raises, as a dropped connection would.
    """

    name = "scripted"
    needs_keepalive = False

    def __init__(
        self,
        tokens: Sequence[str] = ANSWER,
        *,
        first_token_secs: float = 0.0,
        token_secs: float = 0.0,
        fail_after: int | None = None,
    ) -> None:
        self.tokens = list(tokens)
        self.first_token_secs = first_token_secs
        self.token_secs = token_secs
        self.fail_after = fail_after
        self.requests: list[list[dict[str, Any]]] = []  # answers asked for (not warm-ups)
        self.prefilled: list[list[dict[str, Any]]] = []
        self.decoded = 0  # tokens yielded, over every answer
        self.paused = False

    async def stream(
        self, messages: list[dict[str, Any]], *, max_tokens: int, temperature: float
    ) -> AsyncIterator[str | Usage]:
        if max_tokens > 1:
            self.requests.append(messages)
        await asyncio.sleep(self.first_token_secs)
        sent = 0
        for token in self.tokens[:max_tokens]:
            if self.fail_after is not None and sent >= self.fail_after:
                raise RuntimeError("injected engine fault")
            while self.paused:
                await asyncio.sleep(0.002)
            if sent:
                await asyncio.sleep(self.token_secs)
            sent += 1
            self.decoded += 1
            yield token
        yield Usage(prompt_tokens=len(messages) * 10, cached_tokens=0, completion_tokens=sent)

    async def prefill(self, messages: list[dict[str, Any]]) -> None:
        self.prefilled.append(messages)

    def pause_decoding(self, paused: bool) -> None:
        self.paused = paused


class ScriptedVoice:
    """A voice whose audio is a tone of ``secs_per_word`` a word; each phrase may take
    ``delay_secs`` (on the synthesis thread, as Piper does) or, ``fail_next`` times, raise."""

    rate = 16000

    def __init__(self, *, secs_per_word: float = 0.1, delay_secs: float = 0.0) -> None:
        self.secs_per_word = secs_per_word
        self.delay_secs = delay_secs
        self.fail_next = 0
        self.texts: list[str] = []

    def synthesize(self, text: str, out_rate: int) -> np.ndarray:
        self.texts.append(text)
        time.sleep(self.delay_secs)
        if self.fail_next > 0:
            self.fail_next -= 1
            raise RuntimeError("injected synthesiser fault")
        n = int(len(text.split()) * self.secs_per_word * out_rate)
        return (3000 * np.sin(np.arange(n) * 2 * np.pi * 220 / out_rate)).astype(np.int16)
