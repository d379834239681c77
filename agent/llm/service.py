"""The LLM stage: streams an answer for each user turn from a chat engine.

Each ``LLMContextFrame`` starts one streamed completion; tokens go downstream as
``LLMTextFrame`` the moment they arrive. An interruption cancels the task, which stops the
engine decoding (closed HTTP stream, or abandoned in-process generator). An engine error
or timeout speaks a short fallback sentence and records the error in the turn; the call
goes on. At call start the static system prompt is prefilled (pre-warm), and an idle
server engine is touched every ``keepalive_secs`` so its pages stay resident.

Prefill while the caller speaks: each ``PartialTurnFrame`` (the turn so far, from an interim
transcript) is handed to the engine's ``prefill`` (only the newest one when they come faster
than it prefills), so at the turn's end only the last words and the answer header are left.

While synthesis works on an answer's first phrase (``FirstPhraseSynthesisFrame``, from
upstream) the engine pauses decoding: that phrase is what the caller waits for.

Speculation: a ``SpeculativeTurnFrame`` (the pause transcript, before the turn ends) starts
the answer at once, its frames held back. When the turn's real context matches, they are
released (a hit: the LLM's time to first token overlapped endpointing; meanwhile
``HeldAnswerTextFrame`` lets synthesis prepare the first phrase); when it differs or the
caller speaks again, the answer is dropped (a miss, counted in the next turn's record).
Before it starts, the engine's probability that the caller's message ends after those words
goes upstream (``EndOfMessageFrame``) for turn detection: the same prefill the answer needs.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import statistics
import time
from dataclasses import replace

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
    VADUserStartedSpeakingFrame,
)
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor

from agent.clock import CallClock
from agent.errors import ERROR_LINE_CHARS, error_line
from agent.frames import (
    EndOfMessageFrame,
    FirstPhraseSynthesisFrame,
    HeldAnswerTextFrame,
    LLMUsageFrame,
    PartialTurnFrame,
    SpeculativeTurnFrame,
    StopAnswerFrame,
    TimelineEventFrame,
)
from agent.llm.answer import AnswerEditor, Verdict, is_question, repeats
from agent.llm.engines.chat import ChatEngine, Sampling, Usage
from agent.llm.prompt import prefix_after_trim, prompt_messages
from agent.llm.say_again import answer_to_repeat
from agent.settings import LLMSettings, ToolsSettings
from agent.tools.knowledge import Knowledge
from agent.tools.runner import ToolCall, ToolResult, ToolRunner

ENGINE_ERRORS = (openai.OpenAIError, TimeoutError, RuntimeError, ValueError, OSError)
# A failover's error holds the first failure's own line and what was done about it.
ENGINE_ERROR_CHARS = ERROR_LINE_CHARS + 80
# An answer with nothing new to say is asked again: greedy decoding would give the same
# sentence again, so the second try samples (seeded: reproducible), with llm.retry_note
# after the caller's words, as an instruction of its own (added to the caller's words, it
# was read as the caller's and answered: "Here are some new words you can use: one.").
RETRY_TEMPERATURE = 0.7
# Passages found for the caller's words go after them, as an instruction of their own.
KNOWLEDGE_NOTE = "From the documents (say only what they say; do not make anything up):\n"


class AwaitsConfirmation(Exception):
    """A speculative answer reached a call with a side effect: the turn must end first."""


def today_text(today: str | None) -> str:
    """The date ``{today}`` stands for: ``tools.today``, or the call's own date, with the
    weekday ("2026-12-07, Monday"), so "tomorrow" and "on Friday" can be worked out."""
    day = datetime.date.fromisoformat(today) if today else datetime.date.today()
    return f"{day.isoformat()}, {day.strftime('%A')}"


# After the tools' results: without it the small default model, told to answer in words,
# wrote the result out as JSON, or called the tool again.
RESULTS_NOTE = (
    "Now tell the caller what the tool answered, in one short spoken sentence; say any "
    "booking reference, date and time it gave."
)


def dated(settings: LLMSettings, today: str | None) -> LLMSettings:
    """``settings`` with ``{today}`` in the system prompt given (``today_text``): what the
    call's opening says, and what the engine prefills at load, so they are the same bytes."""
    prompt = settings.system_prompt.replace("{today}", today_text(today))
    return settings.model_copy(update={"system_prompt": prompt})


def with_results(messages: list[dict], results: list[ToolResult]) -> list[dict]:
    """The conversation after the model's calls: its call message, one result each, and
    the note that asks for the answer."""
    calls = [
        {"id": r.call.id, "type": "function",
         "function": {"name": r.call.name, "arguments": json.dumps(r.call.arguments)}}
        for r in results
    ]  # fmt: skip
    answers = [
        {"role": "tool", "tool_call_id": r.call.id, "name": r.call.name, "content": r.content}
        for r in results
    ]
    note = {"role": "system", "content": RESULTS_NOTE}
    return [*messages, {"role": "assistant", "content": None, "tool_calls": calls}, *answers, note]


class StreamingLLM(FrameProcessor):
    """User turns in (LLMContextFrame), token stream out (LLMTextFrame)."""

    def __init__(
        self,
        engine: ChatEngine,
        settings: LLMSettings,
        clock: CallClock,
        *,
        greet: bool = False,
        tools: ToolsSettings | None = None,
        knowledge: Knowledge | None = None,
    ) -> None:
        """``greet``: speak ``settings.greeting`` when the call starts; ``tools``: what the
        model may call (the engine offers their schemas) and the filler; ``knowledge``: the
        documents searched for each turn's words."""
        super().__init__()
        self._engine = engine
        self._settings = settings
        self._tools_settings = tools or ToolsSettings()
        self.tool_runner = ToolRunner(self._tools_settings.functions)  # read by benchmarks
        self._knowledge = knowledge
        self._opening = dated(settings, self._tools_settings.today).opening
        self._awaits_confirmation = False  # the speculative answer stopped at a side effect
        self._sampling = Sampling.of(settings)
        self._greeting = settings.greeting.strip() if greet else ""
        self._clock = clock
        self._task: asyncio.Task | None = None
        self._keepalive: asyncio.Task | None = None
        self._last_request = self._clock.now_ms() / 1000
        self._speculated: list[dict] | None = None  # the messages a speculative answer is for
        self._held: list[Frame] | None = None  # its frames, until the turn confirms it
        self._misses = 0
        self._partial: list[dict] | None = None  # the newest turn so far, not yet prefilled
        self._prefilling: asyncio.Task | None = None

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, StartFrame):
            self._keepalive = self.create_task(self._keep_warm())
        if isinstance(frame, FirstPhraseSynthesisFrame):
            self._engine.pause_decoding(frame.busy and self._settings.pause_for_first_phrase)
            return
        if isinstance(frame, PartialTurnFrame):
            if self._settings.prefill_while_speaking and self._task is None:
                self._partial = self._prompt(frame.messages)
                if self._prefilling is None:
                    self._prefilling = self.create_task(self._prefill_partial())
            return
        if isinstance(frame, SpeculativeTurnFrame | LLMContextFrame):
            self._partial = None  # the turn is asked for: its request prefills the rest
        if isinstance(frame, SpeculativeTurnFrame):
            await self._drop_speculation()
            await self._cancel()
            self._awaits_confirmation = False
            speculate = self._settings.speculate
            if speculate:
                self._speculated, self._held = frame.messages, []
            self._task = self.create_task(self._speculate(frame.messages, speculate))
            return
        if isinstance(frame, LLMContextFrame):
            messages = list(frame.context.get_messages())
            if self._speculated is not None and messages == self._speculated:
                self._speculated = None
                if not self._awaits_confirmation:
                    await self._release_held()
                    return
                self._held = None  # confirmed: answered again, the side effect now allowed
            await self._drop_speculation()
            await self._cancel()
            self._task = self.create_task(self._answer(messages))
            return
        if isinstance(frame, VADUserStartedSpeakingFrame):
            await self._drop_speculation()  # the caller spoke again: the pause was not the end
        if isinstance(frame, StopAnswerFrame):
            if await self._cancel():  # the guard blocked it: close the answer cleanly
                await self.push_frame(LLMFullResponseEndFrame())
            return
        if isinstance(frame, InterruptionFrame | EndFrame | CancelFrame):
            await self._drop_speculation()
            await self._cancel()
        if isinstance(frame, EndFrame | CancelFrame):
            for task in (self._keepalive, self._prefilling):
                if task is not None:
                    await self.cancel_task(task)
            self._keepalive = self._prefilling = None
        await self.push_frame(frame, direction)
        if isinstance(frame, StartFrame) and self._greeting:
            await self._speak(self._greeting)

    async def _speak(self, text: str) -> None:
        """A set line, spoken as an answer is: synthesis, the transcript and the context
        treat it alike on every transport."""
        for frame in (LLMFullResponseStartFrame(), LLMTextFrame(text=text),
                      LLMFullResponseEndFrame()):  # fmt: skip
            await self.push_frame(frame)

    def _prompt(self, history: list[dict]) -> list[dict]:
        s = self._settings
        return prompt_messages(self._opening, history, s.history_turns, s.set_lines)

    async def _cancel(self) -> bool:
        """Stop the answer in progress, if any; True when there was one."""
        self._engine.pause_decoding(False)  # a paused answer must not hold the next one
        if self._task is None:
            return False
        await self.cancel_task(self._task)
        self._task = None
        return True

    async def _drop_speculation(self) -> None:
        if self._speculated is None:
            return
        await self._cancel()  # first: a running answer must not see the gate open
        self._speculated, self._held = None, None
        self._misses += 1

    async def _release_held(self) -> None:
        """Push a confirmed speculative answer's frames, in order; later ones flow directly."""
        while self._held:
            await self._push_answer_frame(self._held.pop(0))
        self._held = None

    async def _emit(self, frame: Frame) -> None:
        if self._held is None:
            await self._push_answer_frame(frame)
            return
        self._held.append(frame)
        if isinstance(frame, LLMTextFrame):  # synthesis may prepare the first phrase
            text = "".join(f.text for f in self._held if isinstance(f, LLMTextFrame))
            await self.push_frame(HeldAnswerTextFrame(text=text))

    async def _push_answer_frame(self, frame: Frame) -> None:
        if isinstance(frame, LLMUsageFrame):  # the misses since the last answer that went out
            frame.speculation_misses, self._misses = self._misses, 0
        await self.push_frame(frame)

    async def _prefill_partial(self) -> None:
        try:
            while self._partial is not None:
                messages, self._partial = self._partial, None
                try:
                    with self._clock.busy():
                        await self._engine.prefill(messages)
                except ENGINE_ERRORS:
                    pass  # the turn's own request prefills it, and reports a failing engine
        finally:
            self._prefilling = None

    async def _complete_quietly(self, messages: list[dict] | None = None) -> None:
        """A one-token request: prefills (or keeps warm) the KV cache of its prompt's prefix.

        By default the prefix is the static opening (system prompt and examples).
        """
        messages = messages or [*self._opening, {"role": "user", "content": "Hello."}]
        try:
            async for _ in self._engine.stream(messages, max_tokens=1):
                pass
        except ENGINE_ERRORS:
            pass
        self._last_request = self._clock.now_ms() / 1000

    async def _keep_warm(self) -> None:
        await self._complete_quietly()
        while self._settings.keepalive_secs > 0 and self._engine.needs_keepalive:
            await self._clock.sleep(self._settings.keepalive_secs)
            idle = self._clock.now_ms() / 1000 - self._last_request
            if idle >= self._settings.keepalive_secs and self._task is None:
                await self._complete_quietly()

    async def _speculate(self, history: list[dict], answer: bool) -> None:
        """At a pause: whether the words end the caller's message, then (``answer``) the
        answer they would get."""
        with self._clock.busy():
            try:
                probability = await self._engine.end_of_message(self._prompt(history))
            except ENGINE_ERRORS:
                probability = None  # the turn's own request reports a failing engine
            text = str(history[-1].get("content") or "")
            frame = EndOfMessageFrame(probability=probability, text=text)
            await self.push_frame(frame, FrameDirection.UPSTREAM)
        if answer:
            await self._answer(history, speculative=True)
        else:
            self._task = None

    async def _answer(self, history: list[dict], speculative: bool = False) -> None:
        try:
            with self._clock.busy():  # a compute-paced replay waits for the whole answer
                answer = await self._stream_answer(history, speculative)
                if answer is not None:
                    await self._prefill_after_trim(history, answer)
        except AwaitsConfirmation:
            self._awaits_confirmation = True  # held as it is; the confirmed turn asks again
        finally:
            self._task = None

    async def _stream_answer(self, history: list[dict], speculative: bool) -> str | None:
        """Stream one answer downstream; returns what it said, or None when the engine failed.

        Tokens pass through an ``AnswerEditor`` on their way out: the answer ends at its
        last allowed sentence, and a first sentence already said in this call (or the
        caller's own words) is asked again once with a note, then left unsaid. A caller
        asking to hear the last answer again gets it again, without the engine.
        """
        s = self._settings
        said = [str(m.get("content") or "") for m in history if m.get("role") == "assistant"]
        # The examples' lines, either side, fit no real caller: said back word for word
        # they are nonsense ("I had a really long day today." to a caller's statement).
        examples = [line for e in s.examples for line in (e.caller, e.answer)]
        heard = str(history[-1].get("content") or "")
        editor = AnswerEditor([*examples, *said], heard, s.max_sentences, recent=said)
        await self._emit(LLMFullResponseStartFrame())
        await self._emit(TimelineEventFrame(event="llm_request", at_ms=self._clock.now_ms()))
        self._last_request = self._clock.now_ms() / 1000
        arrivals: list[float] = []
        usage, error = Usage(), None
        again = answer_to_repeat(history)
        try:
            if again is not None:  # asked to hear it again: the same words, no model request
                at_ms = self._clock.now_ms()
                await self._emit(TimelineEventFrame(event="llm_first_token", at_ms=at_ms))
                await self._emit(LLMTextFrame(text=again))
            else:
                messages = await self._with_knowledge(self._prompt(history))
                turn = sum(m.get("role") == "user" for m in history)  # the whole call's
                usage = await self._engine_answer(
                    messages, editor, said, arrivals, speculative, turn
                )
        except ENGINE_ERRORS as exc:
            error = f"llm ({self._engine.name}): {error_line(exc, ENGINE_ERROR_CHARS)}"
            spoken = editor.text
            fallback = self._fallback([*said, spoken])
            await self._emit(LLMTextFrame(text=(" " if spoken else "") + fallback))
        finally:
            self._last_request = self._clock.now_ms() / 1000
        gaps = [1000 * (b - a) for a, b in zip(arrivals, arrivals[1:], strict=False)]
        await self._emit(
            LLMUsageFrame(
                prompt_tokens=usage.prompt_tokens,
                cached_tokens=usage.cached_tokens,
                completion_tokens=usage.completion_tokens or len(arrivals),
                itl_ms=round(statistics.median(gaps), 1) if gaps else None,
                error=error,
                speculative=speculative,
            )
        )
        await self._emit(LLMFullResponseEndFrame())
        return None if error else again or editor.text

    async def _with_knowledge(self, messages: list[dict]) -> list[dict]:
        """The prompt with the passages found for the caller's words after them (after the
        cached prefix and the words prefilled while the caller spoke)."""
        if self._knowledge is None:
            return messages
        await self._emit(TimelineEventFrame(event="retrieval_start", at_ms=self._clock.now_ms()))
        words = str(messages[-1].get("content") or "")
        found = self._knowledge.search(words, self._tools_settings.knowledge_passages)
        await self._emit(TimelineEventFrame(event="retrieval_end", at_ms=self._clock.now_ms()))
        if not found:
            return messages
        return [*messages, {"role": "system", "content": KNOWLEDGE_NOTE + "\n".join(found)}]

    async def _run_tools(
        self, calls: list[ToolCall], turn: int, said: list[str], speculative: bool
    ) -> list[ToolResult]:
        """The calls' results; a filler line for the caller when they take longer than
        ``tools.filler_after_ms``. A side effect waits for the turn to be confirmed."""
        if speculative and any(self.tool_runner.side_effect(c) for c in calls):
            raise AwaitsConfirmation
        await self._emit(TimelineEventFrame(event="tool_call", at_ms=self._clock.now_ms()))
        run = asyncio.ensure_future(self.tool_runner.run(calls, turn))
        after_ms = self._tools_settings.filler_after_ms
        try:
            with self._clock.elsewhere():  # the tools' time passes as the call's
                if after_ms is not None:
                    timer = asyncio.ensure_future(self._clock.sleep(after_ms / 1000))
                    await asyncio.wait({run, timer}, return_when=asyncio.FIRST_COMPLETED)
                    timer.cancel()
                    if not run.done():
                        at_ms = self._clock.now_ms()
                        await self._emit(TimelineEventFrame(event="filler", at_ms=at_ms))
                        line = self._fallback(said, self._tools_settings.filler_lines)
                        await self._emit(LLMTextFrame(text=line + " "))
                results = await run
        finally:
            run.cancel()  # a barge-in: the runner keeps the tools going, not this wait
        await self._emit(TimelineEventFrame(event="tool_result", at_ms=self._clock.now_ms()))
        return results

    async def _engine_answer(
        self,
        messages: list[dict],
        editor: AnswerEditor,
        said: list[str],
        arrivals: list[float],
        speculative: bool = False,
        turn: int = 0,
    ) -> Usage:
        """The engine's answer through the editor: after each round of tool calls, the
        model's answer to their results (``tools.max_rounds`` rounds at most); asked once
        more with a note when it had nothing new, the fallback line when the second try had
        nothing new either. ``turn``: the caller's turn in the call (a lookup runs again in
        another)."""
        may_call = bool(self.tool_runner)
        verdict, usage, calls = await self._stream_edited(
            messages, editor, arrivals, None, may_call
        )
        rounds, made = 0, set()
        while calls and may_call:
            rounds += 1
            results = await self._run_tools(calls, turn, said, speculative)
            messages = with_results(messages, results)
            # After the last round, or a round that only called again what this turn had
            # called already (a small model's loop), the model answers in words.
            repeated = {c.key() for c in calls} <= made
            made |= {c.key() for c in calls}
            may_call = rounds < self._tools_settings.max_rounds and not repeated
            verdict, usage, calls = await self._stream_edited(
                messages, editor, arrivals, None, may_call
            )
        if verdict is Verdict.REGENERATE:
            note = self._settings.retry_note
            retry = [*messages, {"role": "system", "content": note}] if note else messages
            editor.restart(note)
            temperature = max(RETRY_TEMPERATURE, self._settings.temperature)
            sampling = replace(self._sampling, temperature=temperature)
            verdict, usage, _ = await self._stream_edited(retry, editor, arrivals, sampling)
        if not editor.text.strip():  # nothing new to say
            heard = next(str(m.get("content") or "") for m in messages[::-1] if m["role"] == "user")
            lines = None if is_question(heard) else self._settings.acknowledgement_lines
            await self._emit(LLMTextFrame(text=self._fallback(said, lines)))
        return usage

    def _fallback(self, said: list[str], lines: list[str] | None = None) -> str:
        """The first of ``lines`` (the fallback lines by default) this call has not heard yet,
        or, when it heard them all, the one it heard longest ago: the same words twice in a
        row sound like a machine stuck."""
        lines = lines or self._settings.fallback_lines

        def last_heard(line: str) -> int:
            return max((i for i, answer in enumerate(said) if repeats(line, [answer])), default=-1)

        return min(lines, key=last_heard)

    async def _stream_edited(
        self,
        messages: list[dict],
        editor: AnswerEditor,
        arrivals: list[float],
        sampling: Sampling | None = None,
        may_call: bool = False,
    ) -> tuple[Verdict, Usage, list[ToolCall]]:
        """One engine stream through the editor, until the editor ends it or the model does
        (leaving the ``async for`` closes the stream: decoding stops there); and the tools
        the model called instead of answering."""
        s = self._settings
        usage = Usage()
        calls: list[ToolCall] = []
        silent_secs = self._clock.limit(s.timeout_secs)  # a replay's answers wait out the CPU
        async with asyncio.timeout(silent_secs) as stall:
            async for item in self._engine.stream(
                messages, max_tokens=s.max_tokens, sampling=sampling or self._sampling,
                calls=may_call,
            ):  # fmt: skip
                if isinstance(item, Usage | ToolCall):  # the engine is at work: not stalled
                    stall.reschedule(asyncio.get_running_loop().time() + silent_secs)
                if isinstance(item, Usage):
                    usage = item
                    continue
                if isinstance(item, ToolCall):
                    calls.append(item)
                    continue
                if not arrivals:  # when it arrived, not when a held answer is released
                    at_ms = self._clock.now_ms()
                    await self._emit(TimelineEventFrame(event="llm_first_token", at_ms=at_ms))
                arrivals.append(time.monotonic())
                stall.reschedule(asyncio.get_running_loop().time() + silent_secs)
                edit = editor.feed(item)
                if edit.text:
                    await self._emit(LLMTextFrame(text=edit.text))
                if edit.verdict is not Verdict.GO:
                    return edit.verdict, usage, calls
        if calls:
            return Verdict.GO, usage, calls
        edit = editor.finish()
        if edit.text:
            await self._emit(LLMTextFrame(text=edit.text))
        return edit.verdict, usage, calls

    async def _prefill_after_trim(self, history: list[dict], answer: str) -> None:
        """When the next turn will drop old history, prefill its new prefix now.

        Dropping history breaks the cached prefix, and prefilling the rest again costs
        600-900 ms on two cores: done here, while the bot is still talking, the caller's
        next turn finds it cached. A new turn cancels this at once.
        """
        s = self._settings
        upcoming = prefix_after_trim(self._opening, history, answer, s.history_turns, s.set_lines)
        if upcoming is not None:
            await self._complete_quietly(upcoming)
