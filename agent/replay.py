"""``voice-agent replay``: recorded turns through one call, timed.

Real-time pace (the default) is what latency is measured with; compute pace (``ComputeClock``)
gives the same turns, transcripts and answers on any machine. Writes the replay contract:
``turns.jsonl``, ``call.wav`` and ``summary.json``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.audio import load_audio
from agent.clock import CallClock
from agent.llm.engines.chat import ChatEngine
from agent.pipeline import AgentModels, build_pipeline, run_pipeline
from agent.settings import Settings
from agent.timing.budget import Budget
from agent.timing.call_recorder import CallRecorder
from agent.timing.record import TurnRecord, jsonl
from agent.timing.summary import summarize
from agent.timing.tracing import turn_tracer
from agent.timing.turn_timer import TurnTimer
from agent.transports.pacing import PacedOutput
from agent.transports.replay import PlayedClip, ReplayInput, ReplayTurn


def paced_settings(settings: Settings, pace: str) -> Settings:
    """The settings a replay at ``pace`` runs with: at compute pace the voice gives each
    phrase the same length every time, so the timeline after an answer repeats too."""
    if pace != "compute":
        return settings
    tts = settings.tts.model_copy(update={"noise_w_scale": 0.0})
    return settings.model_copy(update={"tts": tts})


def load_turns(inputs: list[Path], rate: int) -> list[ReplayTurn]:
    """All inputs read and checked before the call starts (a bad one fails fast)."""
    return [ReplayTurn(name=str(p), samples=load_audio(p, rate)) for p in inputs]


@dataclass
class ReplayResult:
    """What one replayed call produced (its files are in the out folder as well)."""

    summary: dict[str, Any]
    records: list[TurnRecord]
    played: list[PlayedClip]


async def replay_call(
    turns: list[ReplayTurn],
    out_dir: Path,
    *,
    settings: Settings,
    models: AgentModels,
    engine: ChatEngine,
    budget: Budget,
    clock: CallClock | None = None,
    greeting: bool = False,
) -> ReplayResult:
    """Play the turns through one call (on ``clock``: real-time pace by default) and write
    the run's files.

    ``greeting``: the bot speaks ``llm.greeting`` first; turn 1 waits until it is done."""
    out_dir.mkdir(parents=True, exist_ok=True)
    tracer = turn_tracer(settings.otel_endpoint)  # before the call: a missing extra fails fast
    rate = settings.sample_rate
    clock = clock or CallClock()
    recorder = CallRecorder(rate)
    transport_in = ReplayInput(turns, clock, recorder, rate=rate, after_greeting=greeting)
    transport_out = PacedOutput(clock, recorder, rate=rate)
    pipeline = build_pipeline(
        transport_in, transport_out, models=models, engine=engine, settings=settings,
        clock=clock, greeting=greeting,
    )  # fmt: skip
    timer = TurnTimer(clock, budget)
    await run_pipeline(pipeline, rate=rate, observers=[timer])

    records = timer.records()
    (out_dir / "turns.jsonl").write_text(jsonl(records))
    recorder.save(out_dir / "call.wav")
    summary = summarize(records, budget)
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    if tracer is not None:
        tracer.export(records, clock.wall_t0_ns, call_id=out_dir.name)
        tracer.flush()
    return ReplayResult(summary, records, transport_in.played)
