"""Chat engines: one streaming interface over llama.cpp in-process and any OpenAI-compatible URL.

Both stream the OpenAI chat schema's content deltas and end with a ``Usage``. Stopping the
iteration (an interruption) stops decoding: the HTTP stream is closed, or the in-process
generator is abandoned at the next token. ``prefill`` takes the turn so far (the caller's
words while they still speak) so that at the turn's end only its last words are prefilled.
``end_of_message`` is the model's probability that the caller's message ends where the words
so far end: an end-of-turn signal from the words, at the cost of the prefill that the answer
needs anyway. In process, a prefill reads that probability off the logits it computes, so a
pause transcript that says what the last interim said is judged without evaluating a token.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import openai

from agent.settings import LLMSettings
from agent.timing import cpu
from agent.tools.runner import ToolCall

MAX_PAUSE_SECS = 0.5
# What a message's words may end with when the caller is done: recognition punctuates every
# pause, so the words are judged without it and these tokens (with the template's end of
# message) count as "it ends here".
CLOSING_MARKS = frozenset({".", "?", "!", "...", "…", "?!", "!?", '."', '?"', '!"'})
TRAILING_PUNCTUATION = re.compile(r"[\s.,;:!?…\"']+$")
# Tool calls in process: at most this many in one answer, each at most this many tokens.
MAX_CALLS = 3
CALL_MAX_TOKENS = 160
PREFILL_CHUNK = 64


def unpunctuated(text: str) -> str:
    """The words without the punctuation recognition put after the last one."""
    return TRAILING_PUNCTUATION.sub("", text.strip())


@dataclass
class Usage:
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    completion_tokens: int | None = None


@dataclass(frozen=True)
class Sampling:
    """The decoding options of one request, the same for every engine that has them.

    Engines name the repetition penalty differently (llama.cpp ``repeat_penalty``, vLLM
    ``repetition_penalty``) and a plain OpenAI server has none, so each engine maps it; the
    rest are OpenAI request fields. Defaults are llama.cpp's neutral values, so an engine
    whose server has other defaults (llama_cpp.server's repeat_penalty is 1.1) is told.
    """

    temperature: float = 0.0
    seed: int | None = None
    repeat_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0

    @classmethod
    def of(cls, settings: LLMSettings) -> Sampling:
        return cls(
            temperature=settings.temperature, seed=settings.seed,
            repeat_penalty=settings.repeat_penalty, presence_penalty=settings.presence_penalty,
            frequency_penalty=settings.frequency_penalty,
        )  # fmt: skip


GREEDY = Sampling()
# The name an OpenAI-compatible server gives the repetition penalty (None: it has none).
REPEAT_PENALTY_FIELD = {"llama-server": "repeat_penalty", "vllm": "repetition_penalty"}


class ChatEngine(Protocol):
    """What the LLM stage needs from an engine."""

    name: str
    needs_keepalive: bool  # an idle engine's pages may be swapped out: touch it now and then
    tools: list[dict[str, Any]]  # the tools every request offers (OpenAI format); [] none

    def stream(
        self,
        messages: list[dict[str, Any]],
        *,
        max_tokens: int,
        sampling: Sampling = GREEDY,
        calls: bool = True,
    ) -> AsyncIterator[str | Usage | ToolCall]:
        """Content deltas, or the answer's tool calls (then no content), then a ``Usage``;
        ``calls``: False, words only (the tools' results are in: time to answer)."""
        ...

    async def prefill(self, messages: list[dict[str, Any]]) -> None:
        """Put the prompt up to the last message's words so far in the engine's cache."""

    def pause_decoding(self, paused: bool) -> None:
        """Stop (or go on) decoding between tokens, leaving the CPU to a critical stage."""

    async def end_of_message(self, messages: list[dict[str, Any]]) -> float | None:
        """P(the last message ends after its words so far); None: the engine cannot tell."""


def call_schema(tools: list[dict[str, Any]]) -> dict[str, Any]:
    """The JSON schema of one call of any of ``tools``: the grammar in-process decoding
    follows, so a call names a declared tool and its arguments fit that tool's schema."""
    return {
        "anyOf": [
            {
                "type": "object",
                "properties": {
                    "name": {"const": t["function"]["name"]},
                    "arguments": {"additionalProperties": False, **t["function"]["parameters"]},
                },
                "required": ["name", "arguments"],
                "additionalProperties": False,
            }
            for t in tools
        ]
    }


def parsed_arguments(text: str) -> dict[str, Any]:
    """A server's call arguments (a JSON string); {} when they are not a JSON object (the
    tool then says what it lacks)."""
    try:
        value = json.loads(text or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def templated(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages as a chat template reads them: a call's arguments as an object, where the
    OpenAI schema (and so the conversation) holds them as a JSON string."""
    out = []
    for m in messages:
        if m.get("tool_calls"):
            calls = [
                {**c, "function": {**c["function"],
                                   "arguments": parsed_arguments(c["function"]["arguments"])}}
                for c in m["tool_calls"]
            ]  # fmt: skip
            m = {**m, "content": m.get("content") or "", "tool_calls": calls}
        out.append(m)
    return out


class OpenAIChatEngine:
    """Streaming chat completions from an OpenAI-compatible server (llama.cpp server, vLLM)."""

    name = "openai"
    needs_keepalive = True

    def __init__(
        self,
        base_url: str,
        model: str,
        settings: LLMSettings,
        *,
        api_key: str | None = None,
        server: str | None = None,
        tools: list[dict[str, Any]] | None = None,
    ) -> None:
        """``api_key``: the key of a server the agent started (default: ``llm.api_key``);
        ``server``: "llama-server" or "vllm" when known, for the options only it has;
        ``tools``: offered with every request (the OpenAI ``tools`` API: llama-server needs
        ``--jinja``, vLLM ``--enable-auto-tool-choice --tool-call-parser hermes``)."""
        self.model = model
        self.tools = tools or []
        self._repeat_field = REPEAT_PENALTY_FIELD.get(server or "")
        key = api_key if api_key is not None else settings.api_key.get_secret_value()
        self._client = openai.AsyncOpenAI(
            base_url=base_url, api_key=key, timeout=settings.timeout_secs, max_retries=0,
        )  # fmt: skip

    async def stream(
        self,
        messages: list[dict[str, Any]],
        *,
        max_tokens: int,
        sampling: Sampling = GREEDY,
        calls: bool = True,
    ) -> AsyncIterator[str | Usage | ToolCall]:
        extra = {self._repeat_field: sampling.repeat_penalty} if self._repeat_field else None
        offered: dict[str, Any] = {"tools": self.tools} if self.tools else {}
        if self.tools and not calls:
            offered["tool_choice"] = "none"
        stream = await self._client.chat.completions.create(
            model=self.model,
            messages=messages,  # type: ignore[arg-type]
            max_tokens=max_tokens,
            temperature=sampling.temperature,
            presence_penalty=sampling.presence_penalty,
            frequency_penalty=sampling.frequency_penalty,
            **({"seed": sampling.seed} if sampling.seed is not None else {}),
            extra_body=extra,
            stream=True,
            stream_options={"include_usage": True},
            **offered,
        )
        usage = Usage()
        made: dict[int, dict[str, str]] = {}  # index -> id, name, arguments so far
        async with stream:
            async for chunk in stream:
                if chunk.usage is not None:
                    details = getattr(chunk.usage, "prompt_tokens_details", None)
                    usage = Usage(
                        chunk.usage.prompt_tokens,
                        getattr(details, "cached_tokens", None),
                        chunk.usage.completion_tokens,
                    )
                if not chunk.choices:
                    continue
                delta = chunk.choices[0].delta
                for part in delta.tool_calls or []:
                    call = made.setdefault(part.index, {"id": "", "name": "", "arguments": ""})
                    call["id"] = part.id or call["id"]
                    if part.function is not None:
                        call["name"] += part.function.name or ""
                        call["arguments"] += part.function.arguments or ""
                if delta.content and not made:
                    yield delta.content
        for index, call in sorted(made.items()):
            yield ToolCall(
                call["name"], parsed_arguments(call["arguments"]), call["id"] or f"call_{index}"
            )
        yield usage

    async def prefill(self, messages: list[dict[str, Any]]) -> None:
        """Nothing: the OpenAI schema cannot send an unfinished message (servers prefill at
        request time, reusing their cached prefix)."""

    def pause_decoding(self, paused: bool) -> None:
        """Nothing: a server decodes in its own process, out of our hands."""

    async def end_of_message(self, messages: list[dict[str, Any]]) -> float | None:
        """None: the chat schema returns no probabilities for an unfinished message."""
        return None


class InProcessLlama:
    """llama.cpp inside the agent process: no HTTP hop, and it counts its cached prefix.

    Generation runs on one worker thread (llama.cpp releases the GIL while it computes);
    tokens cross to the event loop through a queue. The prompt is formatted with the
    model's own chat template, so the static system prompt tokenises identically every
    turn and llama.cpp reuses its KV cache for that prefix.
    """

    name = "llama-inprocess"
    # Weights are mlock'ed, and a keepalive request would evict the conversation's KV cache.
    needs_keepalive = False

    def __init__(
        self, gguf: Path, settings: LLMSettings, tools: list[dict[str, Any]] | None = None
    ) -> None:
        """``tools``: offered in every prompt, in the model's own chat-template format."""
        from llama_cpp import Llama, LlamaGrammar
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        self.model = gguf.stem
        self.tools = tools or []
        self.llm = Llama(
            model_path=str(gguf),
            n_ctx=settings.context_size,
            n_threads=settings.threads,
            n_threads_batch=settings.threads,
            use_mlock=True,
            verbose=False,
        )
        eos = self.llm.token_eos()
        self._stop = [self.llm.detokenize([eos], special=True).decode()]
        self._format = Jinja2ChatFormatter(
            template=self.llm.metadata["tokenizer.chat_template"],
            eos_token=self._stop[0],
            bos_token=self.llm.detokenize([self.llm.token_bos()], special=True).decode(),
            stop_token_ids=[eos],
        )
        self._reserve = settings.max_tokens  # room a prefill leaves for the answer
        self._decoding = threading.Event()  # cleared: decoding waits (pause_decoding)
        self._decoding.set()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="llama")
        self._closing = self._closing_tokens()
        self._call_grammar = (
            LlamaGrammar.from_json_schema(json.dumps(call_schema(self.tools)), verbose=False)
            if self.tools
            else None
        )
        # Qwen2.5's (and Hermes') format: <tool_call>\n{"name": ..., "arguments": ...}\n</tool_call>
        self._call_head = self.llm.tokenize(b"<tool_call>\n", add_bos=False, special=True)
        self._call_tail = self.llm.tokenize(b"\n</tool_call>\n", add_bos=False, special=True)
        self._call_starts, self._call_marks = self._calling_tokens()
        self._judged: tuple[list[int], float] | None = None  # the last words judged, verdict
        # Load the weights into memory and prefill the static opening before any call, on
        # the generation thread: llama.cpp's OpenMP keeps a thread team per calling thread,
        # and with a second team alive every token took about 40 % longer on 2 cores.
        warmup = [*settings.opening, {"role": "user", "content": "Hello."}]
        self._executor.submit(
            self._generate, warmup, 1, GREEDY, lambda _: None, threading.Event()
        ).result()

    def _tokens(self, messages: list[dict[str, Any]], *, open_end: bool = False) -> list[int]:
        """The prompt's tokens; ``open_end``: cut right after the last message's text, so it
        is the prefix the full prompt will have when that message is finished."""
        formatted = self._format(messages=templated(messages), tools=self.tools or None)
        prompt = formatted.prompt
        if open_end:
            text = messages[-1]["content"]
            end = prompt.rfind(text)
            prompt = prompt[: end + len(text)] if end >= 0 and text else ""
        add_bos = not formatted.added_special
        return self.llm.tokenize(prompt.encode("utf-8"), add_bos=add_bos, special=True)

    def _closing_tokens(self) -> np.ndarray:
        """The tokens that may follow a finished message's words: closing marks, the end of
        the model's text, and what the chat template puts after a message."""
        closing = {self.llm.token_eos()}
        probe = [{"role": "user", "content": "Hello"}]
        whole, words = self._tokens(probe), self._tokens(probe, open_end=True)
        if len(whole) > len(words) and whole[: len(words)] == words:
            closing.add(whole[len(words)])
        for token in range(self.llm.n_vocab()):
            piece = self.llm.detokenize([token]).decode("utf-8", errors="ignore").strip()
            if piece in CLOSING_MARKS:
                closing.add(token)
        return np.array(sorted(closing))

    def _calling_tokens(self) -> tuple[np.ndarray, list[int]]:
        """The tokens an answer that calls a tool opens with (the template's call tag, or a
        JSON object straight away: Qwen2.5-Coder-0.5B leaves the tag out), and every token
        with a mark of a call in it (braces, angle brackets), barred from spoken words: told
        to answer, the small model wrote the call out as text ('>{"name": ...')."""
        if not self.tools:
            return np.array([], dtype=int), []
        starts, marks = {self._call_head[0]}, {self._call_head[0]}
        for token in range(self.llm.n_vocab()):
            piece = self.llm.detokenize([token]).decode("utf-8", errors="ignore")
            if piece.startswith("{"):
                starts.add(token)
            if any(mark in piece for mark in "{}<>"):
                marks.add(token)
        return np.array(sorted(starts)), sorted(marks)

    def _next_token(self, tokens: list[int], emit: Any = None) -> int:
        """The most likely token after ``tokens``, evaluating only what is not cached;
        ``emit``: told a ``Usage`` after each ``PREFILL_CHUNK`` tokens evaluated, so the
        stage sees a long prefill (the tools' schemas, on a busy machine) at work."""
        self.llm.n_tokens = min(self._cached(tokens), len(tokens) - 1)
        cached = self.llm.n_tokens
        while self.llm.n_tokens < len(tokens):
            self.llm.eval(tokens[self.llm.n_tokens : self.llm.n_tokens + PREFILL_CHUNK])
            if emit is not None:
                emit(Usage(len(tokens), cached))
        logits = np.ctypeslib.as_array(self.llm._ctx.get_logits(), shape=(self.llm.n_vocab(),))
        return int(logits.argmax())

    def _tool_calls(
        self, tokens: list[int], emit: Any, stop: threading.Event
    ) -> tuple[list[ToolCall], int]:
        """The calls the model makes after ``tokens``, each decoded under a grammar that
        allows only a declared tool's name and arguments that fit its schema; and how many
        tokens they took. After each call, another follows when the model opens one. Each
        token emits a ``Usage`` so far: the stage's stall timer sees the engine at work
        while a call, said as a whole, is decoded."""
        calls: list[ToolCall] = []
        produced = 0
        prefix = tokens
        while len(calls) < MAX_CALLS and not stop.is_set():
            head = prefix + self._call_head
            self.llm.n_tokens = min(self._cached(head), len(head) - 1)
            text = ""
            for chunk in self.llm.create_completion(
                head, max_tokens=CALL_MAX_TOKENS, temperature=0.0, grammar=self._call_grammar,
                stream=True,
            ):  # fmt: skip
                if stop.is_set():
                    return calls, produced
                text += chunk["choices"][0]["text"]
                produced += 1
                emit(Usage(len(tokens), None, produced))
            try:
                call = json.loads(text)
            except ValueError:
                break  # cut at the token limit: no call rather than half of one
            calls.append(ToolCall(call["name"], call["arguments"], f"call_{len(calls)}"))
            prefix = head + self.llm.tokenize(text.encode(), add_bos=False) + self._call_tail
            if self._next_token(prefix) != self._call_head[0]:
                break
        return calls, produced

    def _cached(self, tokens: list[int]) -> int:
        """How many leading tokens of ``tokens`` the KV cache already holds."""
        return self.llm.longest_token_prefix(self.llm._input_ids, tokens)

    def _words_tokens(self, messages: list[dict[str, Any]]) -> list[int] | None:
        """The prompt up to the last message's words, without the punctuation recognition
        closed them with: what the verdict on them reads (None: no words, or no room)."""
        words = unpunctuated(str(messages[-1].get("content") or ""))
        if not words:
            return None
        tokens = self._tokens([*messages[:-1], {**messages[-1], "content": words}], open_end=True)
        if len(tokens) < 2 or len(tokens) >= self.llm.n_ctx() - self._reserve:
            return None  # the template did not keep the words as they are, or no room
        return tokens

    def _closing_probability(self, tokens: list[int]) -> float:
        """P(a closing token next) from the logits of the last evaluated token, noted for
        ``tokens``: the same words at the pause then need no evaluation."""
        logits = np.ctypeslib.as_array(self.llm._ctx.get_logits(), shape=(self.llm.n_vocab(),))
        p = np.exp(logits.astype(np.float64) - logits.max())
        probability = float(p[self._closing].sum() / p.sum())
        self._judged = (tokens, probability)
        return probability

    def _prefill(self, messages: list[dict[str, Any]]) -> None:
        """The words so far into the cache; their verdict comes with the last one's logits."""
        tokens = self._words_tokens(messages)
        if tokens is None:
            return
        cached = self._cached(tokens)
        if cached == len(tokens):
            return
        self.llm.n_tokens = cached  # eval() drops the cache past this point first
        self.llm.eval(tokens[cached:])
        self._closing_probability(tokens)

    async def prefill(self, messages: list[dict[str, Any]]) -> None:
        """Prefill on the generation thread, so a turn's request finds it done or waits."""
        await asyncio.get_running_loop().run_in_executor(
            self._executor, cpu.marked("llm_prefill", "llama", self._prefill), messages
        )

    def _end_of_message(self, messages: list[dict[str, Any]]) -> float | None:
        tokens = self._words_tokens(messages)
        if tokens is None:
            return None
        if self._judged is not None and self._judged[0] == tokens:
            return self._judged[1]  # the last interim's prefill said the same words
        # The last token is evaluated again even when cached: its logits are what is read.
        self.llm.n_tokens = min(self._cached(tokens), len(tokens) - 1)
        self.llm.eval(tokens[self.llm.n_tokens :])
        return self._closing_probability(tokens)

    async def end_of_message(self, messages: list[dict[str, Any]]) -> float | None:
        """On the generation thread, like a prefill: the answer then finds the words cached."""
        loop = asyncio.get_running_loop()
        verdict = cpu.marked("llm_verdict", "llama", self._end_of_message)
        return await loop.run_in_executor(self._executor, verdict, messages)

    def pause_decoding(self, paused: bool) -> None:
        """Between two tokens, wait (at most ``MAX_PAUSE_SECS``, so a lost resume cannot
        stall an answer) while ``paused``."""
        if paused:
            self._decoding.clear()
        else:
            self._decoding.set()

    def _generate(
        self, messages: list[dict[str, Any]], max_tokens: int, sampling: Sampling,
        emit: Any, stop: threading.Event, calls: bool = True,
    ) -> Usage:  # fmt: skip
        tokens = self._tokens(messages)
        cached = self._cached(tokens)
        emit(Usage(len(tokens), cached))  # known now: an answer cut short still reports it
        with cpu.job("llm_prefill", "llama") as work:  # until the first token, then decoding
            return self._completion(
                tokens, cached, max_tokens, sampling, emit, stop, work, calls
            )

    def _completion(
        self, tokens: list[int], cached: int, max_tokens: int, sampling: Sampling,
        emit: Any, stop: threading.Event, work: cpu.Job | None, calls: bool,
    ) -> Usage:  # fmt: skip
        produced = 0
        no_call: dict[int, float] | None = None
        if self.tools and max_tokens > 1:
            # The model's first token decides: a call (decoded under the grammar, held
            # back whole) or words (streamed, with what opens a call barred from them).
            if self._next_token(tokens, emit) in self._call_starts and calls:
                made, produced = self._tool_calls(tokens, emit, stop)
                for call in made:
                    emit(call)
                return Usage(len(tokens), cached, produced)
            no_call = dict.fromkeys(self._call_marks, -float("inf"))
            self.llm.n_tokens = len(tokens) - 1  # the last token again: its logits sample
        for chunk in self.llm.create_completion(
            tokens, max_tokens=max_tokens, temperature=sampling.temperature,
            seed=sampling.seed, repeat_penalty=sampling.repeat_penalty,
            presence_penalty=sampling.presence_penalty, logit_bias=no_call,
            frequency_penalty=sampling.frequency_penalty, stream=True, stop=self._stop,
        ):  # fmt: skip
            if stop.is_set():
                break
            text = chunk["choices"][0]["text"]
            if text:
                if produced == 0:
                    cpu.switch(work, "llm_decode")
                produced += 1
                emit(text)
            self._decoding.wait(MAX_PAUSE_SECS)
        return Usage(len(tokens), cached, produced)

    async def stream(
        self,
        messages: list[dict[str, Any]],
        *,
        max_tokens: int,
        sampling: Sampling = GREEDY,
        calls: bool = True,
    ) -> AsyncIterator[str | Usage | ToolCall]:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[str | Usage | ToolCall | None] = asyncio.Queue()
        stop = threading.Event()

        def emit(item: str | Usage | ToolCall) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, item)

        job = loop.run_in_executor(
            self._executor, self._generate, messages, max_tokens, sampling, emit, stop, calls
        )
        job.add_done_callback(lambda _: queue.put_nowait(None))
        try:
            while (item := await queue.get()) is not None:
                if item:
                    yield item
            yield await job
        finally:
            stop.set()
