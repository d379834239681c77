"""The LLM stage with real engines and with a scripted one: answers, cached prefix, fallback,
cancellation, speculation and pausing for the first phrase."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from pipecat.frames import frames as pf
from pipecat.pipeline.pipeline import Pipeline
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.tests.utils import SleepFrame, run_test

from agent import frames as af
from agent import model_store
from agent.clock import CallClock, ComputeClock
from agent.llm.context import UserTurnAggregator
from agent.llm.engines import chat as chat_engine
from agent.llm.engines.chat import InProcessLlama, OpenAIChatEngine
from agent.llm.prompt import prompt_messages
from agent.llm.service import StreamingLLM
from agent.net import free_port
from tests.support.compute_pace import run_paced
from tests.support.fakes import ANSWER, InterruptAtFirstToken, ScriptedEngine


@pytest.fixture(scope="module")
def inprocess(settings) -> InProcessLlama:
    gguf = model_store.resolve(settings.llm.model, "llm", settings.models_dir)
    return InProcessLlama(gguf, settings.llm)


def context(*texts: str) -> LLMContext:
    return LLMContext(messages=[{"role": "user", "content": t} for t in texts])


class Tap(FrameProcessor):
    """Passes frames on and notes when each kind was first seen downstream (on ``clock``), so
    a test can wait for it."""

    def __init__(self, clock: CallClock) -> None:
        super().__init__()
        self._clock = clock
        self.seen: dict[type, float] = {}

    async def process_frame(self, frame, direction):
        await super().process_frame(frame, direction)
        self.seen.setdefault(type(frame), self._clock.now_ms())
        await self.push_frame(frame, direction)


def wait_until(done, limit_secs: float = 120.0):
    """Sleep frames until ``done()`` holds: a step waits for what it needs, on a fast machine or
    a slow one (the limit only keeps a broken stage from hanging the suite)."""
    for _ in range(int(limit_secs / 0.05)):
        if done():
            return
        yield SleepFrame(sleep=0.05)


async def test_answer_streams_tokens_and_reports_cached_prefix(inprocess, settings):
    llm = StreamingLLM(
        inprocess, settings.llm.model_copy(update={"keepalive_secs": 0}), CallClock()
    )
    tap = Tap(CallClock())

    def frames():
        yield pf.LLMContextFrame(context=context("What is the capital of France?"))
        yield from wait_until(lambda: pf.LLMFullResponseEndFrame in tap.seen)

    down, _ = await run_test(Pipeline([llm, tap]), frames_to_send=frames())
    texts = [f.text for f in down if isinstance(f, pf.LLMTextFrame)]
    usage = next(f for f in down if isinstance(f, af.LLMUsageFrame))
    assert texts and "".join(texts).strip()
    assert any(isinstance(f, af.TimelineEventFrame) and f.event == "llm_request" for f in down)
    # The answer editor may pass several held tokens on as one frame.
    assert usage.error is None and usage.completion_tokens >= len(texts)
    # The static system prompt was prefilled at load: most of the prompt is a cache hit.
    assert usage.cached_tokens / usage.prompt_tokens >= 0.6
    assert isinstance(down[-1], pf.LLMFullResponseEndFrame)


async def test_engine_down_speaks_a_fallback_and_records_the_error(settings):
    port = free_port()  # nothing listens here once closed
    engine = OpenAIChatEngine(f"http://127.0.0.1:{port}/v1", "none", settings.llm)
    clock = ComputeClock()
    llm = StreamingLLM(engine, settings.llm.model_copy(update={"keepalive_secs": 0}), clock)
    down, _ = await run_paced(
        llm, frames_to_send=[pf.LLMContextFrame(context=context("Hello?"))], clock=clock
    )
    said = [f.text for f in down if isinstance(f, pf.LLMTextFrame)]
    assert said == [settings.llm.fallback_lines[0]]
    usage = next(f for f in down if isinstance(f, af.LLMUsageFrame))
    assert usage.error and "APIConnectionError" in usage.error


async def test_the_default_model_hears_words_stopped_midway_as_going_on(inprocess, settings):
    """The end-of-turn signal from the words: recognition's full stop after a clause the
    caller left hanging does not fool it (judged without closing punctuation), and a
    finished question scores well over the bar (0.002 and 0.13 against 0.05 here: margins
    no CPU's arithmetic closes)."""
    s, below = settings.llm, settings.turn.words_unfinished_below
    assert below is not None

    async def ends(text: str) -> float | None:
        return await inprocess.end_of_message([*s.opening, {"role": "user", "content": text}])

    going_on = await ends("If the red of the second bow falls upon the green of the first.")
    finished = await ends("What time is it?")
    assert going_on is not None and finished is not None
    assert going_on < below / 3 and finished > below * 2, (going_on, finished)
    assert await ends("...") is None  # no words: no verdict


@pytest.mark.slow
async def test_llama_cpp_computes_on_one_thread_warm_up_included(settings, monkeypatch):
    """llama.cpp's OpenMP keeps a thread team per calling thread; a second team (the warm-up
    on the loading thread, the answers on the generation thread) slowed every token."""
    from llama_cpp import Llama

    threads: set[int] = set()
    evaluate = Llama.eval

    def eval_noting_thread(self, tokens):
        threads.add(threading.get_ident())
        return evaluate(self, tokens)

    monkeypatch.setattr(Llama, "eval", eval_noting_thread)
    gguf = model_store.resolve(settings.llm.model, "llm", settings.models_dir)
    engine = InProcessLlama(gguf, settings.llm)
    messages = [*settings.llm.opening, {"role": "user", "content": "What time is it?"}]
    await engine.prefill(messages)
    await engine.end_of_message(messages)
    answer = [item async for item in engine.stream(messages, max_tokens=3)]
    assert any(isinstance(item, str) for item in answer)
    assert len(threads) == 1 and threading.get_ident() not in threads


async def test_interruption_stops_decoding_at_once(inprocess, settings):
    long = settings.llm.model_copy(
        update={"keepalive_secs": 0, "max_tokens": 200, "max_sentences": 50}
    )
    llm = StreamingLLM(inprocess, long, CallClock())
    stopper = InterruptAtFirstToken()
    ask = context("Tell me a very long story about a dragon and a knight, in detail.")

    def frames():  # the call stays open until the barge-in
        yield pf.LLMContextFrame(context=ask)
        yield from wait_until(lambda: stopper.done)
        yield SleepFrame(sleep=0.2)

    down, _ = await run_test(Pipeline([llm, stopper]), frames_to_send=frames())
    await asyncio.get_running_loop().run_in_executor(inprocess._executor, lambda: None)  # idle
    received = [f for f in down if isinstance(f, pf.LLMTextFrame)]
    assert 0 < len(received) < long.max_tokens
    # The engine's own counter: prompt + what it decoded. Had decoding gone on after the
    # interruption, it would be far past what reached the pipeline (the answer editor may
    # still hold a sentence's tokens back: at most a sentence more than was received).
    formatted = inprocess._format(messages=prompt_messages(long.opening, ask.messages, 4))
    prompt = inprocess.llm.tokenize(formatted.prompt.encode(), add_bos=False, special=True)
    decoded = inprocess.llm.n_tokens - len(prompt)
    assert len(received) - 1 <= decoded <= len(received) + 30 < long.max_tokens


def test_history_is_trimmed_in_whole_pairs_and_steps():
    history = []
    prefixes = []
    for i in range(10):
        history.append({"role": "user", "content": f"u{i}"})
        messages = prompt_messages([{"role": "system", "content": "S"}], history, 4)
        assert messages[0] == {"role": "system", "content": "S"}
        assert messages[-1]["content"] == f"u{i}"
        assert len(messages) <= 2 + 2 * 4
        prefixes.append(messages[1]["content"] if len(messages) > 2 else None)
        history.append({"role": "assistant", "content": f"a{i}"})
    # The oldest kept message changes only every other turn once trimming starts.
    changes = sum(1 for a, b in zip(prefixes[5:], prefixes[6:], strict=False) if a != b)
    assert changes <= 3


def event_at(frames: list, name: str) -> list[float]:
    return [f.at_ms for f in frames if isinstance(f, af.TimelineEventFrame) and f.event == name]


async def test_speculative_answer_is_held_until_the_turn_confirms_it(inprocess, settings):
    clock = CallClock()
    llm = StreamingLLM(inprocess, settings.llm.model_copy(update={"keepalive_secs": 0}), clock)
    tap = Tap(clock)
    ask = context("What is the capital of France?")

    def frames():
        yield af.SpeculativeTurnFrame(messages=list(ask.messages))
        yield from wait_until(lambda: af.HeldAnswerTextFrame in tap.seen)  # detector still deciding
        yield pf.TextFrame(text="turn confirmed")
        yield pf.LLMContextFrame(context=ask)
        yield from wait_until(lambda: pf.LLMFullResponseEndFrame in tap.seen)

    down, _ = await run_test(Pipeline([llm, tap]), frames_to_send=frames())
    marker = next(i for i, f in enumerate(down) if isinstance(f, pf.TextFrame) and not
                  isinstance(f, pf.LLMTextFrame))  # fmt: skip
    first_text = next(i for i, f in enumerate(down) if isinstance(f, pf.LLMTextFrame))
    assert marker < first_text  # nothing was spoken before the turn ended
    # ... but its text so far was shown downstream, for synthesis to prepare the first phrase
    held = [(i, f.text) for i, f in enumerate(down) if isinstance(f, af.HeldAnswerTextFrame)]
    assert held and held[0][0] < marker
    assert all(b.startswith(a) for (_, a), (_, b) in zip(held, held[1:], strict=False))
    spoken = "".join(f.text for f in down if isinstance(f, pf.LLMTextFrame))
    assert spoken.startswith(held[-1][1])
    usage = [f for f in down if isinstance(f, af.LLMUsageFrame)]
    assert len(usage) == 1 and usage[0].speculative and usage[0].speculation_misses == 0
    # The first token's time is when it arrived (while held), not when it was released.
    (first_token,) = event_at(down, "llm_first_token")
    assert first_token <= tap.seen[af.HeldAnswerTextFrame] < tap.seen[pf.TextFrame]


def went_on_talking(paused: float, paused_again: float, answer: float) -> list[pf.Frame]:
    """A pause that was not the turn's end (speculated on), another, then a different turn."""
    paris, spain = context("What is the capital of France?"), context("Tell me about Spain.")
    return [
        af.SpeculativeTurnFrame(messages=list(paris.messages)),
        SleepFrame(sleep=paused),
        pf.VADUserStartedSpeakingFrame(),  # the caller went on talking
        af.SpeculativeTurnFrame(messages=list(paris.messages)),
        SleepFrame(sleep=paused_again),
        pf.LLMContextFrame(context=spain),  # the final transcript differs
        SleepFrame(sleep=answer),
    ]


async def test_a_changed_or_resumed_turn_drops_the_speculative_answer(inprocess, settings):
    llm = StreamingLLM(
        inprocess,
        settings.llm.model_copy(update={"keepalive_secs": 0, "max_tokens": 12}),
        CallClock(),
    )
    tap = Tap(CallClock())
    paris, spain = context("What is the capital of France?"), context("Tell me about Spain.")

    def frames():
        yield af.SpeculativeTurnFrame(messages=list(paris.messages))
        yield SleepFrame(sleep=0.5)
        yield pf.VADUserStartedSpeakingFrame()  # the caller went on talking
        yield af.SpeculativeTurnFrame(messages=list(paris.messages))
        yield SleepFrame(sleep=1.0)
        yield pf.LLMContextFrame(context=spain)  # the final transcript differs
        yield from wait_until(lambda: pf.LLMFullResponseEndFrame in tap.seen)

    down, _ = await run_test(Pipeline([llm, tap]), frames_to_send=frames())
    assert sum(isinstance(f, pf.LLMFullResponseStartFrame) for f in down) == 1
    (usage,) = [f for f in down if isinstance(f, af.LLMUsageFrame)]
    assert not usage.speculative and usage.speculation_misses == 2
    assert len(event_at(down, "llm_request")) == 1


@pytest.mark.parametrize("prefill", [False, True])
async def test_the_turn_so_far_is_prefilled_while_the_caller_speaks(inprocess, settings, prefill):
    llm = StreamingLLM(
        inprocess,
        settings.llm.model_copy(
            update={"keepalive_secs": 0, "max_tokens": 4, "prefill_while_speaking": prefill}
        ),
        CallClock(),
    )
    said = f"Could you tell me how far the {'moon' if prefill else 'sun'} is from the earth?"
    so_far = context(said.rsplit(" ", 2)[0])  # the last interim lacks the last two words
    tap = Tap(CallClock())
    s = settings.llm
    partial = inprocess._tokens(
        prompt_messages(s.opening, so_far.messages, s.history_turns), open_end=True
    )

    def frames():
        yield af.PartialTurnFrame(messages=list(so_far.messages))
        # the caller says the last words (meanwhile, with prefill on, the cache takes the rest)
        yield from wait_until(lambda: not prefill or inprocess._cached(partial) == len(partial))
        yield pf.LLMContextFrame(context=context(said))
        yield from wait_until(lambda: pf.LLMFullResponseEndFrame in tap.seen)

    down, _ = await run_test(Pipeline([llm, tap]), frames_to_send=frames())
    (usage,) = [f for f in down if isinstance(f, af.LLMUsageFrame)]
    # Left to prefill at the turn's end: the user text and the answer header, or (prefilled)
    # only its last two words and the header.
    header = inprocess.llm.tokenize(b"<|im_end|>\n<|im_start|>assistant\n", False, True)
    last_words = inprocess.llm.tokenize(b" the earth?", add_bos=False)
    left = usage.prompt_tokens - usage.cached_tokens
    if prefill:
        assert left <= len(header) + len(last_words) + 1
    else:
        assert left > len(header) + len(last_words) + 5


async def test_interim_transcripts_pass_on_and_offer_the_turn_so_far():
    earlier = [{"role": "user", "content": "Hi."}, {"role": "assistant", "content": "Hello!"}]
    ctx = LLMContext(messages=list(earlier))
    interims = [
        pf.InterimTranscriptionFrame(text=text, user_id="caller", timestamp="")
        for text in ("How far is", " ... ")  # the second has no words to prefill
    ]
    down, _ = await run_test(UserTurnAggregator(ctx), frames_to_send=interims)
    assert [type(f) for f in down] == [
        pf.InterimTranscriptionFrame,
        af.PartialTurnFrame,
        pf.InterimTranscriptionFrame,
    ]
    assert down[1].messages == [*earlier, {"role": "user", "content": "How far is"}]
    assert ctx.get_messages() == earlier  # the context takes only final transcripts


class FirstPhraseSynthesis(FrameProcessor):
    """Stands in for synthesis: once an answer's first tokens are in, it reports its first
    phrase busy for ``BUSY_SECS``, upstream, as PiperTTS does; it records token arrivals."""

    BUSY_SECS = 1.0

    def __init__(self) -> None:
        super().__init__()
        self.arrivals: list[float] = []
        self.busy: tuple[float, float] | None = None

    async def process_frame(self, frame, direction):
        await super().process_frame(frame, direction)
        if isinstance(frame, pf.LLMTextFrame):
            self.arrivals.append(time.monotonic())
            if len(self.arrivals) == 3:
                self.create_task(self._synthesise())
        await self.push_frame(frame, direction)

    async def _synthesise(self) -> None:
        await self.push_frame(af.FirstPhraseSynthesisFrame(busy=True), FrameDirection.UPSTREAM)
        start = time.monotonic()
        await asyncio.sleep(self.BUSY_SECS)
        self.busy = (start, time.monotonic())
        await self.push_frame(af.FirstPhraseSynthesisFrame(busy=False), FrameDirection.UPSTREAM)


@pytest.mark.parametrize("pause", [False, True])
async def test_decoding_pauses_while_the_first_phrase_is_synthesised(
    inprocess, settings, pause, monkeypatch
):
    # a pause outlasts the phrase, so a token after it is the resume's, not the pause's limit
    monkeypatch.setattr(chat_engine, "MAX_PAUSE_SECS", 2 * FirstPhraseSynthesis.BUSY_SECS)
    s = settings.llm.model_copy(
        update={
            "keepalive_secs": 0,
            "max_tokens": 60,
            "max_sentences": 50,
            "pause_for_first_phrase": pause,
        }  # fmt: skip
    )
    synthesis = FirstPhraseSynthesis()
    ask = context("Tell me a long story about a dragon and a knight.")
    clock = CallClock()
    tap = Tap(clock)

    def frames():  # the answer and the phrase both over (unpaused, the answer ends first)
        yield pf.LLMContextFrame(context=ask)
        yield from wait_until(
            lambda: pf.LLMFullResponseEndFrame in tap.seen and synthesis.busy is not None
        )

    await run_test(
        Pipeline([StreamingLLM(inprocess, s, clock), synthesis, tap]), frames_to_send=frames()
    )
    assert synthesis.busy is not None
    start, end = synthesis.busy
    inside = [t for t in synthesis.arrivals if start < t < end]
    after = [t for t in synthesis.arrivals if t > end]
    if pause:  # at most the token in flight when the pause came, and the answer went on
        assert len(inside) <= 1 and after
    else:  # decoding went on meanwhile (how many tokens fit depends on the CPU)
        assert len(inside) >= 2


async def test_an_idle_call_keeps_its_conversation_in_the_in_process_cache(inprocess, settings):
    llm = StreamingLLM(
        inprocess,
        settings.llm.model_copy(update={"keepalive_secs": 0.3, "max_tokens": 8}),
        CallClock(),
    )
    ask = context("Which planet is the largest?")
    tap = Tap(CallClock())

    def frames():
        yield pf.LLMContextFrame(context=ask)
        yield from wait_until(lambda: pf.LLMFullResponseEndFrame in tap.seen)
        yield SleepFrame(sleep=2.0)  # idle for several keepalive periods

    await run_test(Pipeline([llm, tap]), frames_to_send=frames())
    # Idle for several keepalive periods: the cache still starts with this conversation
    # (a keepalive request would have put the bare system prompt there).
    s = settings.llm
    prompt = inprocess._tokens(prompt_messages(s.opening, ask.messages, s.history_turns))
    assert inprocess.llm._input_ids[: len(prompt)].tolist() == prompt


# -- the same behaviours with a scripted engine: milliseconds, no model ---------------------


def scripted_llm(engine: ScriptedEngine, settings, clock: CallClock, **update) -> StreamingLLM:
    return StreamingLLM(
        engine, settings.llm.model_copy(update={"keepalive_secs": 0, **update}), clock
    )


async def test_a_speculative_answer_is_held_then_released_whole(settings):
    engine, clock = ScriptedEngine(), ComputeClock()
    ask = context("What is the capital of France?")
    down, _ = await run_paced(
        scripted_llm(engine, settings, clock),
        frames_to_send=[
            af.SpeculativeTurnFrame(messages=list(ask.messages)),
            SleepFrame(sleep=0.05),  # the whole answer is decoded while the turn is open
            pf.TextFrame(text="turn confirmed"),
            pf.LLMContextFrame(context=ask),
            SleepFrame(sleep=0.05),
        ],
        clock=clock,
    )
    marker = next(i for i, f in enumerate(down) if type(f) is pf.TextFrame)
    spoken = [i for i, f in enumerate(down) if isinstance(f, pf.LLMTextFrame)]
    assert spoken and marker < spoken[0]
    held = [f.text for f in down if isinstance(f, af.HeldAnswerTextFrame)]
    assert held[-1] == "".join(ANSWER) == "".join(down[i].text for i in spoken)
    assert len(engine.requests) == 1  # the confirmed turn did not ask again
    (usage,) = [f for f in down if isinstance(f, af.LLMUsageFrame)]
    assert usage.speculative and usage.speculation_misses == 0


@pytest.mark.parametrize("speculate", [True, False], ids=["speculating", "not speculating"])
async def test_a_pause_transcript_gets_the_engines_verdict_on_its_words(settings, speculate):
    """Upstream to turn detection, with the words it judged; then (when speculating) the
    answer those words would get, held."""
    engine, clock = ScriptedEngine(end_probability=0.01), ComputeClock()
    ask = context("The difference in the rainbow")
    down, up = await run_paced(
        scripted_llm(engine, settings, clock, speculate=speculate),
        frames_to_send=[af.SpeculativeTurnFrame(messages=list(ask.messages))],
        clock=clock,
    )
    (verdict,) = [f for f in up if isinstance(f, af.EndOfMessageFrame)]
    assert verdict.probability == 0.01 and verdict.text == "The difference in the rainbow"
    assert len(engine.requests) == (1 if speculate else 0)
    assert not any(isinstance(f, pf.LLMTextFrame) for f in down)  # held, or never asked


async def test_the_caller_going_on_drops_the_speculation_and_counts_a_miss(settings):
    engine, clock = ScriptedEngine(), ComputeClock()
    down, _ = await run_paced(
        scripted_llm(engine, settings, clock),
        frames_to_send=went_on_talking(0.03, 0.03, 0.2),
        clock=clock,
    )
    assert [m[-1]["content"] for m in engine.requests] == [
        "What is the capital of France?", "What is the capital of France?", "Tell me about Spain."
    ]  # fmt: skip
    assert sum(isinstance(f, pf.LLMFullResponseStartFrame) for f in down) == 1
    assert "".join(f.text for f in down if isinstance(f, pf.LLMTextFrame)) == "".join(ANSWER)
    (usage,) = [f for f in down if isinstance(f, af.LLMUsageFrame)]
    assert not usage.speculative and usage.speculation_misses == 2


async def test_a_barge_in_stops_decoding_at_the_next_token(settings):
    engine, clock = ScriptedEngine([f" w{i}" for i in range(200)]), ComputeClock()
    stopper = InterruptAtFirstToken()
    down, _ = await run_paced(
        Pipeline([scripted_llm(engine, settings, clock, max_tokens=200), stopper]),
        frames_to_send=[pf.LLMContextFrame(context=context("Talk."))],
        clock=clock,
    )
    assert stopper.done
    received = [f for f in down if isinstance(f, pf.LLMTextFrame)]
    assert 0 < len(received) < 200
    assert len(received) <= engine.decoded <= len(received) + 1


async def test_an_engine_failing_mid_answer_ends_it_with_the_fallback_and_the_error(settings):
    engine, clock = ScriptedEngine(fail_after=3), ComputeClock()
    down, _ = await run_paced(
        scripted_llm(engine, settings, clock),
        frames_to_send=[pf.LLMContextFrame(context=context("Hello?"))],
        clock=clock,
    )
    texts = [f.text for f in down if isinstance(f, pf.LLMTextFrame)]
    # (how the first words are grouped into frames is the editor's business)
    assert "".join(texts) == "".join(ANSWER[:3]) + " " + settings.llm.fallback_lines[0]
    (usage,) = [f for f in down if isinstance(f, af.LLMUsageFrame)]
    assert usage.error == "llm (scripted): RuntimeError: injected engine fault"
    assert isinstance(down[-1], pf.LLMFullResponseEndFrame)


@pytest.mark.parametrize("paced", [False, True], ids=["real time", "compute pace"])
async def test_a_slow_first_token_fails_live_but_a_replay_waits_for_it(settings, paced):
    """Live, an engine silent for ``timeout_secs`` has failed and the caller hears the
    fallback line; a compute-paced replay waits for it, however slow or busy the CPU, so
    what the agent answers does not depend on it (a loaded 2-core machine once took 8 s)."""
    engine = ScriptedEngine(first_token_secs=0.3)
    clock = ComputeClock() if paced else CallClock()
    llm = StreamingLLM(
        engine, settings.llm.model_copy(update={"keepalive_secs": 0, "timeout_secs": 0.1}), clock
    )
    ask = [pf.LLMContextFrame(context=context("Hello?"))]
    if paced:  # the answer is all there once the stage has settled
        down, _ = await run_paced(llm, frames_to_send=ask, clock=clock)
    else:  # live, the limit is on the wall clock: the test waits past it
        down, _ = await run_test(llm, frames_to_send=[*ask, SleepFrame(sleep=0.5)])
    said = "".join(f.text for f in down if isinstance(f, pf.LLMTextFrame))
    (usage,) = [f for f in down if isinstance(f, af.LLMUsageFrame)]
    if paced:
        assert said == "".join(ANSWER) and usage.error is None, (said, usage.error)
    else:
        assert said == settings.llm.fallback_lines[0], said
        assert usage.error == "llm (scripted): TimeoutError", usage.error


@pytest.mark.parametrize("pause", [False, True])
async def test_a_scripted_answer_pauses_while_the_first_phrase_is_synthesised(settings, pause):
    engine = ScriptedEngine([f" w{i}" for i in range(200)], token_secs=0.01)  # past the phrase
    synthesis = FirstPhraseSynthesis()

    def resumed() -> bool:  # the phrase is done and a token came after it
        return synthesis.busy is not None and synthesis.arrivals[-1] > synthesis.busy[1]

    def frames():
        yield pf.LLMContextFrame(context=context("Talk."))
        yield from wait_until(resumed)

    await run_test(
        Pipeline([scripted_llm(engine, settings, CallClock(), max_tokens=200,
                               pause_for_first_phrase=pause),
                  synthesis]),
        frames_to_send=frames(),
    )  # fmt: skip
    assert synthesis.busy is not None
    start, end = synthesis.busy
    inside = [t for t in synthesis.arrivals if start + 0.05 < t < end]
    after = [t for t in synthesis.arrivals if t > end]
    assert after and (not inside if pause else len(inside) >= 10)


async def test_words_prefilled_while_the_caller_speaks_are_judged_without_evaluating(
    inprocess, settings, monkeypatch
):
    """The verdict on a pause transcript that says what the last interim said comes off that
    interim's prefill: no token is evaluated for it while the caller waits."""
    from llama_cpp import Llama

    s = settings.llm
    evaluated: list[int] = []
    evaluate = Llama.eval

    def eval_counting(self, tokens):
        evaluated.append(len(tokens))
        return evaluate(self, tokens)

    def turn(text: str) -> list[dict]:
        return [*s.opening, {"role": "user", "content": text}]

    monkeypatch.setattr(Llama, "eval", eval_counting)
    await inprocess.prefill(turn("Where is the train station"))  # the last interim
    evaluated.clear()
    noted = await inprocess.end_of_message(turn("Where is the train station?"))  # the pause's
    assert evaluated == []
    await inprocess.prefill(turn("If the red of the second bow falls upon"))  # going on
    evaluated.clear()
    judged = await inprocess.end_of_message(turn("Where is the train station."))
    assert evaluated  # other words since: judged afresh, and alike
    assert noted is not None and judged is not None
    assert abs(noted - judged) < 0.02, (noted, judged)
