"""Stand-ins for the chat engine, the voice and a replayed run: scripted tokens, audio and
timings, with delays and faults, so behaviour is tested in milliseconds without a model."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from pipecat.frames.frames import (
    BotStartedSpeakingFrame,
    BotStoppedSpeakingFrame,
    Frame,
    LLMTextFrame,
    TranscriptionFrame,
)
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor

from agent.llm.engines.chat import GREEDY, Sampling, Usage
from agent.timing.budget import Budget
from agent.timing.call_recorder import CallRecorder
from agent.timing.record import LLMUsage, jsonl
from agent.timing.summary import summarize
from agent.timing.turn_timer import Turn
from agent.tools.runner import ToolCall

ANSWER = ("The", " capital", " of", " France", " is", " Paris.", " It", " is", " lovely.")


def tone(secs: float, rate: int = 16000) -> np.ndarray:
    """An audible tone standing in for speech: reports and checks look for sound."""
    n = int(secs * rate)
    return (3000 * np.sin(np.arange(n) * 2 * np.pi * 220 / rate)).astype(np.int16)


class ScriptedEngine:
    """A chat engine that answers every request with the same tokens, at a set pace.

    It records what it was asked, how many tokens it decoded and when it was paused;
    ``fail_after`` tokens into an answer it raises, as a dropped connection would;
    ``end_probability`` is its verdict on every message's words.
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
        end_probability: float | None = None,
    ) -> None:
        self.tokens = list(tokens)
        self.end_probability = end_probability
        self.first_token_secs = first_token_secs
        self.token_secs = token_secs
        self.fail_after = fail_after
        self.requests: list[list[dict[str, Any]]] = []  # answers asked for (not warm-ups)
        self.prefilled: list[list[dict[str, Any]]] = []
        self.decoded = 0  # tokens yielded, over every answer
        self.paused = False

    async def stream(
        self,
        messages: list[dict[str, Any]],
        *,
        max_tokens: int,
        sampling: Sampling = GREEDY,
        calls: bool = True,
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

    async def end_of_message(self, messages: list[dict[str, Any]]) -> float | None:
        return self.end_probability


class IdleHooks:
    """A scripted engine's hooks that do nothing: no prefill, no pause between tokens, no
    verdict on the words (None: the stage judges them without the engine)."""

    name = "scripted"
    needs_keepalive = False

    async def prefill(self, messages: list[dict[str, Any]]) -> None:
        pass

    def pause_decoding(self, paused: bool) -> None:
        pass

    async def end_of_message(self, messages: list[dict[str, Any]]) -> float | None:
        return None


class ScriptedAnswers(IdleHooks):
    """Streams the next scripted answer word by word; records each request and how many
    tokens the stage took before it closed the stream."""

    def __init__(self, *answers: str) -> None:
        self.answers = list(answers)
        self.requests: list[dict[str, Any]] = []
        self.taken: list[int] = []

    async def stream(
        self,
        messages: list[dict[str, Any]],
        *,
        max_tokens: int,
        sampling: Sampling,
        calls: bool = True,
    ) -> AsyncIterator[str | Usage]:
        self.requests.append({"messages": messages, "sampling": sampling})
        self.taken.append(0)
        text = self.answers.pop(0) if self.answers else ""
        tokens = [w if i == 0 else " " + w for i, w in enumerate(text.split(" "))]
        for token in tokens[:max_tokens]:
            self.taken[-1] += 1
            yield token
        yield Usage(10, 5, len(tokens))


class ScriptedToolEngine(IdleHooks):
    """A chat engine that plays a script of replies, one per request: a list of tool calls
    (what a model that calls tools yields instead of words) or an answer's text. It records
    every request's messages, so a test sees the tool results the model was given."""

    def __init__(self, *replies: list[ToolCall] | str, tools: list[dict] | None = None) -> None:
        self.replies = list(replies)
        self.tools = tools or []
        self.requests: list[list[dict[str, Any]]] = []
        self.calls_allowed: list[bool] = []  # per request: whether it could call tools

    async def stream(
        self,
        messages: list[dict[str, Any]],
        *,
        max_tokens: int,
        sampling: Sampling = GREEDY,
        calls: bool = True,
    ) -> AsyncIterator[str | Usage | ToolCall]:
        if max_tokens > 1:  # not a warm-up
            self.requests.append(messages)
            self.calls_allowed.append(calls)
            reply = self.replies.pop(0) if self.replies else "Okay."
            if isinstance(reply, str):
                for i, word in enumerate(reply.split(" ")):
                    yield word if i == 0 else " " + word
            else:
                for call in reply:
                    yield call
        yield Usage(len(messages) * 10, 0, 1)


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
        return tone(len(text.split()) * self.secs_per_word, out_rate)


# (user text, bot text, caller speech ms, endpointing ms, LLM request after turn_end ms,
#  llm_ttft ms, bot audio ms): a plain turn, a speculative one, one cut short by a barge-in.
SCRIPTED_TURNS = (
    ("What is the capital of France?", "The capital of France is Paris.", 2200, 210, 6, 70, 1800),
    ("And of Spain?", "Madrid is the capital of Spain.", 1100, 260, -45, 60, 1500),
    ("Tell me a story.", "Once upon a time there was a cat.", 1300, 230, 4, 90, 900),
)


def scripted_run(out: Path, budget: Budget) -> Path:
    """A run folder of the record contract (turns.jsonl, summary.json, call.wav), written
    from ``SCRIPTED_TURNS`` by the replay's own record code, for report tests without models."""
    out.mkdir(parents=True, exist_ok=True)
    recorder = CallRecorder(16000)
    records, start = [], 500.0
    for number, (user, bot, talk, endpointing, request, ttft, spoken) in enumerate(
        SCRIPTED_TURNS, 1
    ):
        turn = Turn(number, f"clip{number}.wav", user, bot, bot if number < 3 else bot[:10])
        e = turn.events
        e["speech_start"], e["speech_end"] = start, start + talk
        e["turn_end"] = e["speech_end"] + endpointing
        e["stt_final"] = e["turn_end"] - 30
        e["llm_request"] = e["turn_end"] + request
        e["llm_first_token"] = e["llm_request"] + ttft
        e["first_phrase"] = e["llm_first_token"] + 25
        e["tts_first_audio"] = e["first_phrase"] + 80
        e["first_audio_out"] = e["tts_first_audio"] + 5
        e["bot_audio_end"] = e["first_audio_out"] + spoken
        if number == 3:
            e["interrupted"] = e["bot_audio_end"]
        turn.llm = LLMUsage(
            prompt_tokens=90, cached_tokens=80, completion_tokens=9, itl_ms=11.0,
            speculative=request < 0, speculation_misses=0,
        )  # fmt: skip
        recorder.write_user(recorder.position(start), tone(talk / 1000).tobytes())
        recorder.write_bot(recorder.position(e["first_audio_out"]), tone(spoken / 1000).tobytes())
        records.append(turn.record(budget))
        start = e["bot_audio_end"] + 1500
    (out / "turns.jsonl").write_text(jsonl(records))
    (out / "summary.json").write_text(json.dumps(summarize(records, budget), indent=2) + "\n")
    recorder.save(out / "call.wav")
    return out


class HeardOut(FrameProcessor):
    """A stand-in for the bot (named a fake: no LLM or voice here): answers each final
    transcript at once and is heard to the end (the bot's start and stop, sent upstream)."""

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        await self.push_frame(frame, direction)
        if isinstance(frame, TranscriptionFrame):
            await self.push_frame(BotStartedSpeakingFrame(), FrameDirection.UPSTREAM)
            await self.push_frame(BotStoppedSpeakingFrame(), FrameDirection.UPSTREAM)


class InterruptAtFirstToken(FrameProcessor):
    """Barges in the moment the answer's first token arrives, however long that takes."""

    def __init__(self) -> None:
        super().__init__()
        self.done = False

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        await self.push_frame(frame, direction)
        if isinstance(frame, LLMTextFrame) and not self.done:
            self.done = True
            await self.broadcast_interruption()
