"""One live call: its clock, recording, pipeline, observer and files.

A call runs until the caller hangs up (``hang_up()``: the client closed, Twilio said ``stop``,
Ctrl-C) or its ``max_secs`` have passed; then its pipeline is cancelled (the caller is gone,
nothing is left to play) and its files are written under ``calls/<timestamp>-<kind>-<id>/``:
``turns.jsonl`` (the replay contract's records, plus ``barge_in_ms`` on interrupted turns),
``summary.json``, ``call.json`` (who, when, why it ended, transport details) and, unless disabled,
``call.wav``. ``turns.jsonl`` is also rewritten after every answer, so a call that dies
leaves its turns behind, and every ``report_every_turns`` finished turns a ``rolling summary:``
line (voice-to-voice p50/p95 so far, turns over budget) is logged and sent to the client as a
``summary`` event. With ``otel_endpoint`` set, the final records are exported as spans.
Each turn's record is handed once to ``on_turns`` (the server's metrics) once it is settled: its
answer has been heard, or a later turn began, or the call ended. An answer can "finish" before
the turn's own answer played (the greeting stopping after the caller's turn ended, an answer
cut off before it began); a record handed then would count the turn without its latency.

The turn records are taken from the timer when an answer finishes (the bot stopped, was
interrupted, or had nothing to say), so a barge-in's ``interrupted`` event has landed on the
turn it cut off before that turn is written.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loguru import logger
from pipecat.frames.frames import (
    BotStoppedSpeakingFrame,
    InterimTranscriptionFrame,
    TranscriptionFrame,
    TTSTextFrame,
)
from pipecat.observers.base_observer import BaseObserver, FramePushed
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor

from agent.clock import CallClock
from agent.errors import UserError
from agent.frames import NoReplyFrame, TimelineEventFrame, TranscriptRevisionFrame
from agent.llm.engines.chat import ChatEngine
from agent.pipeline import AgentModels, build_pipeline, run_pipeline
from agent.private_files import make_private_folder, write_private
from agent.settings import Settings
from agent.timing.budget import Budget
from agent.timing.call_recorder import CallRecorder, NullRecorder
from agent.timing.record import TurnRecord, jsonl
from agent.timing.summary import ms, summarize
from agent.timing.tracing import TurnTracer, turn_tracer
from agent.timing.turn_timer import Turn, TurnTimer
from agent.transports.live import LiveInput, LiveOutput

Event = dict[str, Any]
CANCEL_WAIT_SECS = 10.0


@dataclass
class Runtime:
    """What every call of this process shares: settings, loaded models, LLM engine, budget."""

    settings: Settings
    models: AgentModels
    engine: ChatEngine
    budget: Budget


def with_barge_in(records: list[TurnRecord]) -> list[TurnRecord]:
    """Add ``barge_in_ms`` (caller speech start -> bot audio stopped) to interrupted turns.

    The caller's speech that cut the bot off opens the next turn, so its ``speech_start``
    is that turn's.
    """
    if not records:  # a call without a turn still writes its files
        return records
    for record, following in zip(records, [*records[1:], None], strict=True):
        stopped = record.events["interrupted"]
        started = following.events["speech_start"] if following else None
        record.barge_in_ms = (
            # 0 when the bot was already quiet (between phrases) as the caller began
            round(max(0.0, stopped - started), 1)
            if stopped is not None and started is not None
            else None
        )
    return records


def rolling_summary(call_id: str, records: list[TurnRecord], budget: Budget) -> Event:
    """Voice-to-voice so far, with summary.json's numbers, for QA watching a long call."""
    summary = summarize(records, budget)
    v2v = summary["stages"]["voice_to_voice"]
    return {
        "type": "summary",
        "call": call_id,
        "turns": summary["turns"],
        "answered": summary["answered_turns"],
        "p50_ms": v2v["p50"],
        "p95_ms": v2v["p95"],
        "over_budget": sum(1 for r in records if r.budget.get("voice_to_voice") == "fail"),
        "budget_ms": budget.stages["voice_to_voice"].ceiling,
    }


def summary_line(event: Event) -> str:
    """The ``rolling summary:`` log line of a ``summary`` event."""
    return (
        f"rolling summary: call {event['call']}, {event['turns']} turns "
        f"({event['answered']} answered), voice_to_voice p50 {ms(event['p50_ms'], 1)} ms "
        f"p95 {ms(event['p95_ms'], 1)} ms, {event['over_budget']} over the "
        f"{event['budget_ms']:.0f} ms budget"
    )


def answered_turn(turns: list[Turn]) -> Turn | None:
    """The turn the bot is answering: the latest one whose end has been decided."""
    for turn in reversed(turns):
        if turn.events["turn_end"] is not None:
            return turn
    return None


def settled_turns(turns: list[Turn]) -> int:
    """How many turns, from the first, have records that will not change: every turn before
    the latest, and the latest once its answer has been heard."""
    if not turns:
        return 0
    return len(turns) - (turns[-1].events["first_audio_out"] is None)


class CallObserver(BaseObserver):
    """Feeds the turn timer first (its clock readings stay exact), then reports the call.

    Reports go to ``emit`` as small events: ``interim``/``final`` transcripts, ``bot_text``
    (a phrase, once its audio was played), ``barge_in`` and ``turn`` (the ``TurnRecord``,
    whenever an answer finishes; a sender makes it JSON). ``emit`` must not block.
    """

    def __init__(
        self,
        timer: TurnTimer,
        budget: Budget,
        output: FrameProcessor,
        emit: Callable[[Event], None],
        on_answer: Callable[[], None],
    ) -> None:
        super().__init__()
        self.timer = timer
        self._budget = budget
        self._output = output
        self._emit = emit
        self._on_answer = on_answer
        self._speech_start: float | None = None

    async def on_push_frame(self, data: FramePushed) -> None:
        await self.timer.on_push_frame(data)
        frame = data.frame
        if data.source is self._output and data.direction == FrameDirection.DOWNSTREAM:
            # What the transport passes on has been played (a phrase's text follows its audio).
            if isinstance(frame, TTSTextFrame):
                self._emit({"type": "bot_text", "text": frame.text})
            elif isinstance(frame, BotStoppedSpeakingFrame):
                self._answer_finished()
        if not data.first_push:
            return
        if isinstance(frame, InterimTranscriptionFrame):
            self._emit({"type": "interim", "text": frame.text})
        elif isinstance(frame, TranscriptionFrame):
            self._emit({"type": "final", "text": frame.text})
        elif isinstance(frame, TranscriptRevisionFrame):
            self._emit({"type": "revised", "turns": [list(pair) for pair in frame.turns]})
        elif isinstance(frame, TimelineEventFrame):
            self._on_event(frame)
        elif isinstance(frame, NoReplyFrame):
            self._answer_finished()

    def _on_event(self, frame: TimelineEventFrame) -> None:
        if frame.event == "speech_start":
            self._speech_start = frame.at_ms
        elif frame.event == "interrupted":
            latency = None
            if self._speech_start is not None:
                latency = round(frame.at_ms - self._speech_start, 1)
            self._emit({"type": "barge_in", "ms": latency})
            self._answer_finished()

    def _answer_finished(self) -> None:
        turn = answered_turn(self.timer.turns)
        if turn is not None:
            self._emit({"type": "turn", "record": turn.record(self._budget)})
        self._on_answer()


class LiveCall:
    """One caller, one pipeline, one folder of results."""

    def __init__(
        self,
        runtime: Runtime,
        calls_dir: Path,
        *,
        kind: str,
        record_wav: bool = True,
        emit: Callable[[Event], None] | None = None,
        details: Callable[[], dict[str, Any]] | None = None,
        max_secs: float | None = None,
        on_turns: Callable[[list[TurnRecord]], None] | None = None,
    ) -> None:
        self.runtime = runtime
        self.settings = runtime.settings.for_phone() if kind == "phone" else runtime.settings
        self.max_secs = max_secs  # a call left open forever would hold its pipeline forever
        self.kind = kind
        self.id = secrets.token_hex(8)  # 64 bits: not guessable, never reused
        self.dir = calls_dir / f"{time.strftime('%Y%m%d-%H%M%S')}-{kind}-{self.id}"
        if not calls_dir.is_dir():
            make_private_folder(calls_dir, exist_ok=True)
        make_private_folder(self.dir)  # exclusive: never writes into a folder it did not make
        rate = runtime.settings.sample_rate
        self.clock = CallClock()
        self.recorder: CallRecorder = (
            CallRecorder(rate, self.dir / "call.wav.part") if record_wav else NullRecorder(rate)
        )
        self.info: dict[str, Any] = {
            "id": self.id, "kind": kind, "smart_turn_lean": self.settings.turn.smart_turn_lean,
        }  # fmt: skip
        self._record_wav = record_wav
        self._emit = emit or (lambda _event: None)
        self._details = details
        self._hang_up = asyncio.Event()
        self._end_reason = "the pipeline ended"
        self.timer: TurnTimer | None = None
        self._input: LiveInput | None = None
        self._started = time.time()
        self._report_every = runtime.settings.report_every_turns
        self._reported = 0  # turns covered by the last rolling summary
        self._on_turns = on_turns
        self._handed = 0  # turns handed to on_turns
        self._tracer = self._open_tracer()

    def _open_tracer(self) -> TurnTracer | None:
        """The span exporter, if configured; a missing extra costs the spans, not the call."""
        try:
            return turn_tracer(self.runtime.settings.otel_endpoint)
        except UserError as exc:
            logger.warning("call {}: tracing off: {}", self.id, exc)
            return None

    @property
    def rate(self) -> int:
        return self.runtime.settings.sample_rate

    def hang_up(self, reason: str) -> None:
        """End the call (safe to call more than once, and before ``run``)."""
        if not self._hang_up.is_set():
            self._end_reason = reason
            self._hang_up.set()

    async def run(self, transport_in: LiveInput, transport_out: LiveOutput) -> list[TurnRecord]:
        """Run the call until it is hung up; write its files; return its turn records."""
        rt = self.runtime
        self._input = transport_in
        # Off the event loop: building a call's VAD and Smart Turn state would stall the
        # audio of every other call in progress.
        pipeline = await asyncio.to_thread(
            build_pipeline, transport_in, transport_out, models=rt.models, engine=rt.engine,
            settings=self.settings, clock=self.clock, greeting=True,
        )  # fmt: skip
        self.timer = TurnTimer(self.clock, rt.budget)
        observer = CallObserver(self.timer, rt.budget, transport_out, self._emit,
                                self.answer_finished)  # fmt: skip
        running = asyncio.ensure_future(run_pipeline(pipeline, rate=self.rate,
                                                     observers=[observer]))  # fmt: skip
        hung_up = asyncio.ensure_future(self._hang_up.wait())
        try:
            left = None if self.max_secs is None else self.max_secs - (time.time() - self._started)
            await asyncio.wait({running, hung_up}, timeout=None if left is None else max(left, 0),
                               return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
            if not running.done() and not hung_up.done():
                self.hang_up(f"the call reached its {self.max_secs:g} s limit")
            if not running.done():
                await transport_in.hang_up(self._end_reason)
                await asyncio.wait({running}, timeout=CANCEL_WAIT_SECS)
            if not running.done():
                logger.warning("call {}: the pipeline did not stop in time", self.id)
                running.cancel()
                await asyncio.wait({running}, timeout=CANCEL_WAIT_SECS)
            elif running.exception() is not None:
                exc = running.exception()
                logger.error("call {}: the pipeline failed: {}: {}", self.id,
                             type(exc).__name__, exc)  # fmt: skip
                self._end_reason = f"the pipeline failed: {type(exc).__name__}"
        finally:
            hung_up.cancel()
            if not running.done():
                running.cancel()
            records = self.finish()
        return records

    def _records(self, *, final: bool) -> list[TurnRecord]:
        if self.timer is None:
            return []
        if final:
            return with_barge_in(self.timer.records())
        return with_barge_in([t.record(self.runtime.budget) for t in self.timer.turns])

    def answer_finished(self) -> None:
        """An answer finished: save the turns so far; every N finished turns, summarise them."""
        records = self._records(final=False)
        self._write_turns(records)
        finished = answered_turn(self.timer.turns) if self.timer is not None else None
        self._hand_on(records[: settled_turns(self.timer.turns)] if self.timer else [])
        if not self._report_every or finished is None:
            return
        if finished.number >= self._reported + self._report_every:
            self._reported = finished.number
            event = rolling_summary(self.id, records[: finished.number], self.runtime.budget)
            logger.info("{}", summary_line(event))
            self._emit(event)

    def _hand_on(self, records: list[TurnRecord]) -> None:
        """Give ``on_turns`` the records it has not had yet."""
        fresh, self._handed = records[self._handed :], max(self._handed, len(records))
        if fresh and self._on_turns is not None:
            self._on_turns(fresh)

    def _write_turns(self, records: list[TurnRecord]) -> None:
        """Rewrite turns.jsonl with every turn so far (atomically)."""
        tmp = self.dir / "turns.jsonl.tmp"
        write_private(tmp, jsonl(records))
        tmp.replace(self.dir / "turns.jsonl")

    def finish(self) -> list[TurnRecord]:
        """Write the call's files (turns, call.wav, summary, call.json) and export its spans;
        its records."""
        records = self._records(final=True)
        self._write_turns(records)
        self._hand_on(records)
        if self._record_wav:
            self.recorder.save(self.dir / "call.wav")
        summary = summarize(records, self.runtime.budget)
        write_private(self.dir / "summary.json", json.dumps(summary, indent=2) + "\n")
        self.info.update(
            started_at=time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(self._started)),
            duration_s=round(time.time() - self._started, 1),
            end_reason=self._end_reason,
            turns=len(records),
            barge_in_ms=[r.barge_in_ms for r in records if r.barge_in_ms is not None],
        )
        if self._input is not None:
            self.info.update(self._input.stats())
        if self._details is not None:
            self.info.update(self._details())
        write_private(self.dir / "call.json", json.dumps(self.info, indent=2) + "\n")
        if self._tracer is not None:
            self._tracer.export(records, self.clock.wall_t0_ns, call_id=self.id)
        return records
