"""The conversation set: scripted calls through the LLM stage, text in, spoken text out.

Each caller turn goes in as a final transcript (``TranscriptionFrame``) and comes out as the
phrases the chunker hands to synthesis, through the same processors as in a call
(``UserTurnAggregator -> StreamingLLM -> PhraseChunker``), with the spoken phrases fed back
into the context as the output transport would (``SpokenTextAggregator``). So what is judged
is what a caller would hear, after the answer editor, the sentence stop and the history
filter. Tests and ``benchmarks.conversation`` both run it.
"""

from __future__ import annotations

import asyncio
import re
import statistics
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pipecat.frames.frames import (
    EndWorkerFrame,
    Frame,
    LLMFullResponseEndFrame,
    StartFrame,
    TranscriptionFrame,
    TTSTextFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor

from agent.clock import CallClock
from agent.frames import LLMUsageFrame, PhraseFrame, TimelineEventFrame
from agent.llm.answer import has_loop, is_echo, normalise, repeats, sentences
from agent.llm.context import SpokenTextAggregator, UserTurnAggregator
from agent.llm.engines.chat import ChatEngine, Usage
from agent.llm.service import StreamingLLM
from agent.pipeline import run_pipeline
from agent.settings import LLMSettings, ToolsSettings
from agent.synthesis.chunker import PhraseChunker
from agent.tools.knowledge import Knowledge

CONVERSATIONS = Path(__file__).resolve().parents[1] / "tests" / "data" / "conversations.yaml"
ANSWER_TIMEOUT_SECS = 60.0
DECODED = "decoded_tokens"  # frame metadata: the engine's tokens streamed so far
CALL_START_SECS = 1.0  # no caller speaks sooner after the call starts


@dataclass
class Turn:
    """One caller turn and what a good answer must and must not contain."""

    user: str
    must: list[list[str]] = field(default_factory=list)
    must_not: list[str] = field(default_factory=list)
    hear_again: bool = False  # asks to hear the last answer again: a repeat is the answer
    calls: list[dict[str, Any]] = field(default_factory=list)  # {tool, args}: must be called
    no_call: bool = False  # no tool may be called


@dataclass
class Conversation:
    name: str
    turns: list[Turn]


@dataclass
class ToolSet:
    """What a tool set's file adds: the date "today" is, and environment variables set
    for each conversation ("{tmp}" in a value: a fresh folder, e.g. for its database)."""

    today: str | None = None
    env: dict[str, str] = field(default_factory=dict)


def load_conversations(path: Path = CONVERSATIONS) -> list[Conversation]:
    data = yaml.safe_load(path.read_text())
    return [
        Conversation(
            name=c["name"],
            turns=[
                Turn(
                    user=t["user"],
                    must=[[str(a) for a in group] for group in t.get("must") or []],
                    must_not=[str(x) for x in t.get("must_not") or []],
                    hear_again=bool(t.get("hear_again")),
                    calls=list(t.get("calls") or []),
                    no_call=bool(t.get("no_call")),
                )
                for t in c["turns"]
            ],
        )
        for c in data["conversations"]
    ]


def load_tool_set(path: Path) -> ToolSet:
    data = yaml.safe_load(path.read_text())
    today = data.get("today")
    return ToolSet(today=str(today) if today else None, env=dict(data.get("env") or {}))


def call_verdict(turn: Turn, called: list[dict[str, Any]]) -> str | None:
    """How the turn's calls compare with what it asks for: "right" (every expected tool
    called with the listed arguments; others may be present), "wrong" (a call, not the one
    expected), "missing" (none), "spurious" (a call where none belonged), "none" (rightly
    none); None when the turn says nothing about tools."""
    if turn.no_call:
        return "spurious" if called else "none"
    if not turn.calls:
        return None
    if not called:
        return "missing"

    def matches(want: dict[str, Any], got: dict[str, Any]) -> bool:
        args = got["args"]
        return got["tool"] == want["tool"] and all(
            normalise(str(args.get(k, ""))) == normalise(str(v))
            for k, v in (want.get("args") or {}).items()
        )

    ok = all(any(matches(w, g) for g in called) for w in turn.calls)
    return "right" if ok else "wrong"


# What an answer states as a fact: booking references, times, dates and other numbers, and
# that something was booked or cancelled.
REFERENCE = re.compile(r"\b[A-Z]{1,3}-?\d{2,}\b")
CLAIMS = re.compile(r"\b(booked|reserved|confirmed|cancell?ed)\b", re.IGNORECASE)


def unsupported(answer: str, sources: list[str], results: list[str]) -> list[str]:
    """What ``answer`` states that neither a tool's result, the documents nor the caller
    gave (``sources``: all of that as text; ``results``: the tools' results this turn):
    a reference or number found nowhere, or a booking or cancellation no tool made."""
    known = " ".join(sources)
    digits = set(re.findall(r"\d+", re.sub(r"(?<=\d)[ :.-](?=\d)", "", known)))
    digits |= set(re.findall(r"\d+", known))
    digits |= {str(int(h) % 12 or 12) for h in re.findall(r"\b(\d{1,2}):\d\d\b", known)}
    found = [r for r in REFERENCE.findall(answer) if r.replace("-", "") not in known]
    for number in re.findall(r"\d+", re.sub(r"(?<=\d)[ ](?=\d)", "", answer)):
        if number not in digits and f"{number}" not in found:
            found.append(number)
    done = " ".join(results)
    for claim in CLAIMS.findall(answer):
        word = claim.lower()
        if word in ("cancelled", "canceled"):
            if '"cancelled": true' not in done:
                found.append(word)
        elif '"booked": true' not in done:
            found.append(word)
    return found


def _says(answer: str, phrase: str) -> bool:
    """``phrase`` in ``answer`` as whole words, any case; digits also with spaces removed."""
    words, wanted = normalise(answer), normalise(phrase)
    if not wanted:
        return False
    if re.search(rf"\b{re.escape(wanted)}\b", words):
        return True
    joined = re.sub(r"(?<=\d) (?=\d)", "", words)  # "3 5 8" -> "358"
    return bool(re.search(rf"\b{re.escape(wanted)}\b", joined))


def check(turn: Turn, answer: str, bot_name: str) -> list[str]:
    """What the answer misses: one line per failed must group or present must-not phrase."""
    named = [[a.replace("{bot_name}", bot_name) for a in group] for group in turn.must]
    misses = [f"none of {group}" for group in named if not any(_says(answer, a) for a in group)]
    return misses + [f"says {x!r}" for x in turn.must_not if _says(answer, x)]


@dataclass
class TurnResult:
    conversation: str
    turn: int
    user: str
    answer: str
    misses: list[str]
    repeated: bool  # says a sentence an earlier answer said, unasked (see Turn.hear_again)
    loop: bool  # a phrase repeated inside the answer
    echo: bool  # repeats the caller's words
    fallback: bool  # one of the fallback lines: the stage had nothing new to say
    sentences: int
    words: int
    ttft_ms: float | None  # llm_request -> first token
    first_phrase_ms: float | None  # llm_request -> first phrase to synthesis (2 words)
    # tokens the engine had decoded when the first phrase went to synthesis: the answer's
    # opening hold in tokens, the same on any machine (greedy decoding)
    first_phrase_tokens: int | None
    completion_tokens: int | None
    itl_ms: float | None
    error: str | None
    called: list[dict[str, Any]] = field(default_factory=list)  # {tool, args} as called
    call_verdict: str | None = None  # see call_verdict()
    unsupported: list[str] = field(default_factory=list)  # stated, given by nothing

    @property
    def passed(self) -> bool:
        return not self.misses


def judged(
    conversation: str,
    number: int,
    turn: Turn,
    answer: str,
    earlier: list[str],
    bot_name: str,
    fallback_lines: list[str],
    called: list[dict[str, Any]] | None = None,
    unsupported_claims: list[str] | None = None,
    **timing: Any,
) -> TurnResult:
    """One answer judged: its checks, and whether it repeats an earlier answer (unasked),
    loops, echoes the caller, is a fallback line; ``timing``: the TurnResult fields
    measured, where known."""
    timed = ("ttft_ms", "first_phrase_ms", "first_phrase_tokens", "completion_tokens", "itl_ms")
    fields = dict.fromkeys((*timed, "error"))
    return TurnResult(
        conversation=conversation, turn=number, user=turn.user, answer=answer,
        misses=check(turn, answer, bot_name),
        repeated=repeats(answer, earlier) and not turn.hear_again, loop=has_loop(answer),
        echo=is_echo(answer, turn.user), sentences=len(sentences(answer)),
        fallback=normalise(answer) in {normalise(line) for line in fallback_lines},
        words=len(normalise(answer).split()), **(fields | timing),
        called=called or [], call_verdict=call_verdict(turn, called or []),
        unsupported=unsupported_claims or [],
    )  # fmt: skip


class _Caller(FrameProcessor):
    """Says each turn as a final transcript once the previous answer has been spoken."""

    def __init__(self, turns: list[str], answered: asyncio.Event) -> None:
        super().__init__()
        self._turns = turns
        self._answered = answered
        self._task: asyncio.Task | None = None

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        await self.push_frame(frame, direction)
        if isinstance(frame, StartFrame):
            self._task = self.create_task(self._talk())

    async def _talk(self) -> None:
        await asyncio.sleep(CALL_START_SECS)  # the stage warms its engine as a call starts
        try:
            for text in self._turns:
                self._answered.clear()
                await self.push_frame(TranscriptionFrame(text=text, user_id="caller", timestamp=""))
                await asyncio.wait_for(self._answered.wait(), ANSWER_TIMEOUT_SECS)
        except TimeoutError:
            pass  # no answer: the caller hangs up, the turns left count as unanswered
        await self.push_frame(EndWorkerFrame(), FrameDirection.UPSTREAM)


class _Listener(FrameProcessor):
    """Stands where synthesis and the output are: every phrase counts as spoken at once."""

    def __init__(
        self, clock: CallClock, answered: asyncio.Event, tool_results: Callable[[], list]
    ) -> None:
        super().__init__()
        self._clock = clock
        self._answered = answered
        self.tool_results = tool_results  # the call's tool results so far
        self.answers: list[dict[str, Any]] = []
        self._current: dict[str, Any] = {}

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, TimelineEventFrame) and frame.event == "llm_request":
            self._current = {"request": frame.at_ms, "phrases": [], "from_token": _tag(frame)}
        elif isinstance(frame, TimelineEventFrame) and frame.event == "llm_first_token":
            self._current["first_token"] = frame.at_ms
        elif isinstance(frame, PhraseFrame):
            self._current.setdefault("first_phrase", self._clock.now_ms())
            self._current.setdefault("phrase_token", _tag(frame))
            self._current.setdefault("phrases", []).append(frame.text)
            await self.push_frame(TTSTextFrame(text=frame.text, text_type="sentence"))
            return
        elif isinstance(frame, LLMUsageFrame):
            self._current["usage"] = frame
        await self.push_frame(frame, direction)
        if isinstance(frame, LLMFullResponseEndFrame) and self._current.get("request"):
            self._current["tools_done"] = len(self.tool_results())
            self.answers.append(self._current)
            self._current = {}
            self._answered.set()


def _tag(frame: Frame) -> int:
    return frame.metadata[DECODED]


class _Counted:
    """The engine, with the tokens it streamed in this call counted (``decoded``)."""

    def __init__(self, engine: ChatEngine) -> None:
        self._engine = engine
        self.decoded = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    async def stream(self, *args: Any, **kwargs: Any) -> AsyncIterator[str | Usage]:
        async for item in self._engine.stream(*args, **kwargs):
            if isinstance(item, str):
                self.decoded += 1
            yield item


class _CountedLLM(StreamingLLM):
    """Each frame it sends carries how many tokens the engine had streamed then: a token's
    text goes out before the next token is asked for."""

    def __init__(
        self, engine: _Counted, settings: LLMSettings, clock: CallClock, **options: Any
    ) -> None:
        super().__init__(engine, settings, clock, **options)  # type: ignore[arg-type]
        self._counted = engine

    async def push_frame(
        self, frame: Frame, direction: FrameDirection = FrameDirection.DOWNSTREAM
    ) -> None:
        frame.metadata[DECODED] = self._counted.decoded
        await super().push_frame(frame, direction)


class _CountedChunker(PhraseChunker):
    """A phrase carries the count of the text frame that released it."""

    _decoded = 0

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        self._decoded = frame.metadata.get(DECODED, self._decoded)
        await super().process_frame(frame, direction)

    async def push_frame(
        self, frame: Frame, direction: FrameDirection = FrameDirection.DOWNSTREAM
    ) -> None:
        frame.metadata.setdefault(DECODED, self._decoded)
        await super().push_frame(frame, direction)


async def talk(
    conversation: Conversation,
    engine: ChatEngine,
    settings: LLMSettings,
    tools: ToolsSettings | None = None,
    knowledge: Knowledge | None = None,
) -> list[TurnResult]:
    """One scripted call through the LLM stage; one result per caller turn. ``tools``: what
    the model may call (the engine offers the same); ``knowledge``: the agent's documents."""
    clock = CallClock()
    context = LLMContext()
    answered = asyncio.Event()
    stage = _CountedLLM(
        _Counted(engine), settings.model_copy(update={"keepalive_secs": 0}), clock,
        tools=tools, knowledge=knowledge,
    )  # fmt: skip
    listener = _Listener(clock, answered, lambda: stage.tool_runner.results)
    pipeline = Pipeline(
        [
            _Caller([t.user for t in conversation.turns], answered),
            UserTurnAggregator(context),
            stage,
            _CountedChunker(first_min_words=2, min_words=6),
            listener,
            SpokenTextAggregator(context),
        ]
    )
    await run_pipeline(pipeline, rate=16000)
    results: list[TurnResult] = []
    unanswered = {"phrases": [], "error": "no answer"}
    answers = listener.answers + [unanswered] * (len(conversation.turns) - len(listener.answers))
    done = stage.tool_runner.results
    sources = list(knowledge.texts) if knowledge else []
    before = 0
    for i, (turn, got) in enumerate(zip(conversation.turns, answers, strict=True), 1):
        answer = " ".join(got["phrases"])
        usage: LLMUsageFrame | None = got.get("usage")
        earlier = [r.answer for r in results]
        after = got.get("tools_done", before)
        now = done[before:after]
        before = after
        sources += [turn.user, *(r.content for r in now)]
        claims = unsupported(answer, sources, [r.content for r in now])
        called = [{"tool": r.call.name, "args": r.call.arguments} for r in now]

        def since_request(key: str, got: dict = got) -> float | None:
            return round(got[key] - got["request"], 1) if key in got else None

        results.append(
            judged(
                conversation.name, i, turn, answer, earlier, settings.bot_name,
                settings.set_lines,
                ttft_ms=since_request("first_token"), first_phrase_ms=since_request("first_phrase"),
                first_phrase_tokens=(
                    got["phrase_token"] - got["from_token"] if "phrase_token" in got else None
                ),
                completion_tokens=usage.completion_tokens if usage else None,
                itl_ms=usage.itl_ms if usage else None,
                error=usage.error if usage else got.get("error"),
                called=called, unsupported_claims=claims,
            )
        )  # fmt: skip
    return results


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))], 1)


def summarise(results: list[TurnResult]) -> dict[str, Any]:
    """The benchmark's figures over a run's turns."""
    ttft = [r.ttft_ms for r in results if r.ttft_ms is not None]
    phrase = [r.first_phrase_ms for r in results if r.first_phrase_ms is not None]
    phrase_tokens = [r.first_phrase_tokens for r in results if r.first_phrase_tokens is not None]
    itl = [r.itl_ms for r in results if r.itl_ms]
    verdicts = [r.call_verdict for r in results]
    tools: dict[str, Any] = {}
    if any(v is not None for v in verdicts):
        tools = {
            "tool_turns": sum(v in ("right", "wrong", "missing") for v in verdicts),
            "right_calls": verdicts.count("right"),
            "wrong_calls": verdicts.count("wrong"),
            "missing_calls": verdicts.count("missing"),
            "no_call_turns": sum(v in ("none", "spurious") for v in verdicts),
            "spurious_calls": verdicts.count("spurious"),
            "unsupported_answers": sum(bool(r.unsupported) for r in results),
        }
    return tools | {
        "turns": len(results),
        "checks_met": sum(r.passed for r in results),
        "checks_met_share": round(sum(r.passed for r in results) / len(results), 3),
        "repeated_answers": sum(r.repeated for r in results),
        "loops": sum(r.loop for r in results),
        "echoes": sum(r.echo for r in results),
        "fallbacks": sum(r.fallback for r in results),
        "over_two_sentences": sum(r.sentences > 2 for r in results),
        "errors": sum(bool(r.error) for r in results),
        "words_per_answer": round(statistics.mean(r.words for r in results), 1),
        "ttft_ms": {"p50": _pct(ttft, 0.5), "p95": _pct(ttft, 0.95)},
        "first_phrase_ms": {"p50": _pct(phrase, 0.5), "p95": _pct(phrase, 0.95)},
        "first_phrase_tokens": {
            "p50": _pct(phrase_tokens, 0.5),
            "p95": _pct(phrase_tokens, 0.95),
            "mean": round(statistics.mean(phrase_tokens), 2) if phrase_tokens else None,
        },  # fmt: skip
        "tokens_per_s": round(1000 / statistics.median(itl), 1) if itl else None,
    }


def as_dicts(results: list[TurnResult]) -> list[dict[str, Any]]:
    return [asdict(r) | {"passed": r.passed} for r in results]
