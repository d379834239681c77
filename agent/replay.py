"""``voice-agent replay``: recorded turns through one call, at real-time pace, timed.

Writes the replay contract of DESIGN.md: ``turns.jsonl``, ``call.wav`` and ``summary.json``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agent.audio import load_audio
from agent.clock import CallClock, CallRecorder
from agent.llm.engines import ChatEngine
from agent.pipeline import AgentModels, build_pipeline, run_pipeline
from agent.settings import Settings
from agent.timing.budget import Budget
from agent.timing.summary import summarize
from agent.timing.tracing import turn_tracer
from agent.timing.turn_timer import TurnTimer
from agent.transports.replay import ReplayInput, ReplayTurn, SimulatedSpeakerOutput


def load_turns(inputs: list[Path], rate: int) -> list[ReplayTurn]:
    """All inputs read and checked before the call starts (a bad one fails fast)."""
    return [ReplayTurn(name=str(p), samples=load_audio(p, rate)) for p in inputs]


async def replay_call(
    turns: list[ReplayTurn],
    out_dir: Path,
    *,
    settings: Settings,
    models: AgentModels,
    engine: ChatEngine,
    budget: Budget,
    greeting: bool = False,
) -> dict[str, Any]:
    """Play the turns through one call and write the run's files; returns the summary.

    ``greeting``: the bot speaks ``llm.greeting`` first; turn 1 waits until it is done."""
    out_dir.mkdir(parents=True, exist_ok=True)
    tracer = turn_tracer(settings.otel_endpoint)  # before the call: a missing extra fails fast
    rate = settings.sample_rate
    clock = CallClock()
    recorder = CallRecorder(rate)
    transport_in = ReplayInput(turns, clock, recorder, rate=rate, after_greeting=greeting)
    transport_out = SimulatedSpeakerOutput(clock, recorder, rate=rate)
    pipeline = build_pipeline(
        transport_in, transport_out, models=models, engine=engine, settings=settings,
        clock=clock, greeting=greeting,
    )  # fmt: skip
    timer = TurnTimer(clock, budget, inputs=[t.name for t in turns])
    await run_pipeline(pipeline, rate=rate, observers=[timer])

    records = timer.records()
    with (out_dir / "turns.jsonl").open("w") as fh:
        for record in records:
            fh.write(json.dumps(record) + "\n")
    recorder.save(out_dir / "call.wav")
    summary = summarize(records, budget)
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    if tracer is not None:
        tracer.export(records, clock.wall_t0_ns, call_id=out_dir.name)
        tracer.flush()
    return summary
