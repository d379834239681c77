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
from agent.settings import LLMSettings

ENGINE_ERRORS = (openai.OpenAIError, TimeoutError, RuntimeError, ValueError, OSError)
# A failover's error holds the first failure's own line and what was done about it.
ENGINE_ERROR_CHARS = ERROR_LINE_CHARS + 80
# An answer with nothing new to say is asked again: greedy decoding would give the same
# sentence again, so the second try samples (seeded: reproducible), with llm.retry_note
# after the caller's words, as an instruction of its own (added to the caller's words, it
# was read as the caller's and answered: "Here are some new words you can use: one.").
RETRY_TEMPERATURE = 0.7


class StreamingLLM(FrameProcessor):
    """User turns in (LLMContextFrame), token stream out (LLMTextFrame)."""

    def __init__(
        self, engine: ChatEngine, settings: LLMSettings, clock: CallClock, *, greet: bool = False
    ) -> None:
        """``greet``: speak ``settings.greeting`` when the call starts."""
        super().__init__()
        self._engine = engine
        self._settings = settings
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
            speculate = self._settings.speculate
            if speculate:
                self._speculated, self._held = frame.messages, []
            self._task = self.create_task(self._speculate(frame.messages, speculate))
            return
        if isinstance(frame, LLMContextFrame):
            messages = list(frame.context.get_messages())
            if self._speculated is not None and messages == self._speculated:
                self._speculated = None
                await self._release_held()
                return
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
        return prompt_messages(s.opening, history, s.history_turns, s.set_lines)

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
        messages = messages or [*self._settings.opening, {"role": "user", "content": "Hello."}]
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
                messages = self._prompt(history)
                usage = await self._engine_answer(messages, editor, said, arrivals)
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

    async def _engine_answer(
        self, messages: list[dict], editor: AnswerEditor, said: list[str], arrivals: list[float]
    ) -> Usage:
        """The engine's answer through the editor: asked once more with a note when it had
        nothing new, the fallback line when the second try had nothing new either."""
        verdict, usage = await self._stream_edited(messages, editor, arrivals)
        if verdict is Verdict.REGENERATE:
            note = self._settings.retry_note
            retry = [*messages, {"role": "system", "content": note}] if note else messages
            editor.restart(note)
            temperature = max(RETRY_TEMPERATURE, self._settings.temperature)
            sampling = replace(self._sampling, temperature=temperature)
            verdict, usage = await self._stream_edited(retry, editor, arrivals, sampling)
        if not editor.text.strip():  # nothing new to say
            heard = str(messages[-1].get("content") or "")
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
    ) -> tuple[Verdict, Usage]:
        """One engine stream through the editor, until the editor ends it or the model does
        (leaving the ``async for`` closes the stream: decoding stops there)."""
        s = self._settings
        usage = Usage()
        silent_secs = self._clock.limit(s.timeout_secs)  # a replay's answers wait out the CPU
        async with asyncio.timeout(silent_secs) as stall:
            async for item in self._engine.stream(
                messages, max_tokens=s.max_tokens, sampling=sampling or self._sampling
            ):
                if isinstance(item, Usage):
                    usage = item
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
                    return edit.verdict, usage
        edit = editor.finish()
        if edit.text:
            await self._emit(LLMTextFrame(text=edit.text))
        return edit.verdict, usage

    async def _prefill_after_trim(self, history: list[dict], answer: str) -> None:
        """When the next turn will drop old history, prefill its new prefix now.

        Dropping history breaks the cached prefix, and prefilling the rest again costs
        600-900 ms on two cores: done here, while the bot is still talking, the caller's
        next turn finds it cached. A new turn cancels this at once.
        """
        s = self._settings
        upcoming = prefix_after_trim(s.opening, history, answer, s.history_turns, s.set_lines)
        if upcoming is not None:
            await self._complete_quietly(upcoming)
