"""Our pipeline against a stock Pipecat pipeline: same real-speech turns, same models, same run.

Both pipelines are fed by our replay input and play into our simulated speaker, so each
writes a call.wav on one timeline; voice-to-voice for both is read off those recordings
(agent/timing/callwav.py), not from either side's logs. Rounds alternate which pipeline goes
first, so drift on a shared machine hits both.

    .venv/bin/python -m benchmarks.turns --rounds 2
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from agent import model_store
from agent.audio import load_audio
from agent.clock import CallClock
from agent.llm.servers.llama import LlamaServer
from agent.pipeline import run_pipeline
from agent.reports.load import load_run
from agent.settings import Settings, load_settings
from agent.timing.budget import rounded_percentile
from agent.timing.call_recorder import CallRecorder
from agent.timing.callwav import load_thresholds, measure_call
from agent.timing.record import TurnRecord
from agent.timing.timeline import PART_STAGES
from agent.transports.pacing import PacedOutput
from agent.transports.replay import ReplayInput, ReplayTurn
from benchmarks.results import write_json
from benchmarks.stock_pipecat import build_stock_pipeline
from tests.support.clips import CLIPS, SAMPLES

ROOT = Path(__file__).resolve().parents[1]


def warm_server(server: LlamaServer, system_prompt: str) -> None:
    """One short request with the system prompt, as a deployed server would have had.

    A fresh llama_cpp.server answered its first request here in 8 s TTFT (19 s in all), later
    ones in about 25 ms; without this the stock pipeline's first turn measures that, not Pipecat.
    """
    body = {
        "model": server.model_path.stem,
        "max_tokens": 1,
        "messages": [
            {"role": "system", "content": system_prompt},
            {"role": "user", "content": "Hello."},
        ],
    }
    headers = {"Authorization": f"Bearer {server.api_key}"}
    httpx.post(f"{server.base_url}/chat/completions", json=body, headers=headers,
               timeout=120).raise_for_status()  # fmt: skip


def run_ours(clips: list[Path], out: Path, env: dict[str, str] | None = None) -> list[TurnRecord]:
    """`voice-agent replay` as shipped, in its own process; returns its turn records.

    ``env``: the process environment (e.g. ``VOICE_AGENT_...`` settings); default: ours.
    """
    cmd = [sys.executable, "-m", "agent.cli", "replay", *map(str, clips), "--out", str(out)]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"our replay failed: {done.stderr[-2000:]}")
    return load_run(out)


async def _stock_call(
    clips: list[Path], out: Path, settings: Settings, server: LlamaServer, answer_timeout: float
) -> None:
    rate = settings.sample_rate
    clock = CallClock()
    recorder = CallRecorder(rate)
    turns = [ReplayTurn(name=str(p), samples=load_audio(p, rate)) for p in clips]
    transport_in = ReplayInput(
        turns, clock, recorder, rate=rate, answer_timeout_secs=answer_timeout
    )
    transport_out = PacedOutput(clock, recorder, rate=rate)
    pipeline = build_stock_pipeline(
        transport_in,
        transport_out,
        whisper_dir=model_store.resolve(settings.asr.model, "asr", settings.models_dir),
        piper_voice=model_store.resolve(settings.tts.voice, "tts", settings.models_dir),
        llm_base_url=server.base_url,
        llm_api_key=server.api_key,
        llm_model=server.model_path.stem,
        system_prompt=settings.llm.system_prompt,
        max_tokens=settings.llm.max_tokens,
    )
    await run_pipeline(pipeline, rate=rate)
    recorder.save(out / "call.wav")


def run_stock(
    clips: list[Path], out: Path, settings: Settings, server: LlamaServer, answer_timeout: float
) -> None:
    """One call through the stock pipeline; writes out/call.wav."""
    out.mkdir(parents=True, exist_ok=True)
    warm_server(server, settings.llm.system_prompt)
    asyncio.run(_stock_call(clips, out, settings, server, answer_timeout))


def mode_summary(turns: list[dict[str, Any]]) -> dict[str, Any]:
    """p50/p95 over turns answered after the user's speech end (early answers counted apart)."""
    v2v = [
        t["voice_to_voice_ms"]
        for t in turns
        if t["voice_to_voice_ms"] is not None and not t["early"]
    ]
    return {
        "turns": len(turns),
        "answered": sum(t["bot_start_ms"] is not None for t in turns),
        "answered_early": sum(t["early"] for t in turns),
        "voice_to_voice_p50_ms": rounded_percentile(v2v, 50),
        "voice_to_voice_p95_ms": rounded_percentile(v2v, 95),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("clips", nargs="*", type=Path, help="user turns (default: the 4 samples)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "bench_turns.json")
    parser.add_argument("--answer-timeout", type=float, default=20.0, help="stock: secs per turn")
    args = parser.parse_args()
    clips = args.clips or [SAMPLES / c for c in CLIPS]
    thresholds = load_thresholds(SAMPLES / "manifest.jsonl")
    if missing := [c.name for c in clips if c.name not in thresholds]:
        print(
            f"no published thresholds for {missing} in agent/samples/manifest.jsonl",
            file=sys.stderr,
        )
        return 2
    settings = load_settings()
    rate = settings.sample_rate
    loaded = [(c.name, load_audio(c, rate)) for c in clips]
    work = args.out.with_suffix("")
    results: dict[str, list[dict[str, Any]]] = {"ours": [], "stock": []}
    stages: dict[str, list[float]] = {s: [] for s in PART_STAGES}

    gguf = model_store.resolve(settings.llm.model, "llm", settings.models_dir)
    with LlamaServer(gguf, settings.llm) as server:
        for r in range(1, args.rounds + 1):
            order = ["ours", "stock"] if r % 2 else ["stock", "ours"]
            for mode in order:
                out = work / f"round{r}_{mode}"
                t0 = time.monotonic()
                records: list[TurnRecord] = []
                if mode == "ours":
                    records = run_ours(clips, out)
                    for rec in records:
                        for s in PART_STAGES:
                            if (value := rec.stages[s]) is not None:
                                stages[s].append(value)
                else:
                    run_stock(clips, out, settings, server, args.answer_timeout)
                measured = [t.as_dict() for t in measure_call(out / "call.wav", loaded, thresholds)]
                for t, rec in zip(measured, records, strict=False):
                    t["reported_voice_to_voice_ms"] = rec.voice_to_voice_ms
                    t["user_text"], t["bot_text"] = rec.user_text, rec.bot_text
                for t in measured:
                    t["round"] = r
                results[mode] += measured
                print(f"round {r} {mode}: {time.monotonic() - t0:.0f} s, v2v ms "
                      f"{[t['voice_to_voice_ms'] for t in measured]}", flush=True)  # fmt: skip

    summary = {m: mode_summary(results[m]) for m in results}
    summary["ours"]["stage_p50_ms"] = {s: rounded_percentile(v, 50) for s, v in stages.items()}
    a, b = summary["ours"]["voice_to_voice_p50_ms"], summary["stock"]["voice_to_voice_p50_ms"]
    ratio = round(b / a, 2) if a and b else None
    report = {
        "clips": [c.name for c in clips],
        "rounds": args.rounds,
        "summary": summary,
        "ratio_stock_over_ours_p50": ratio,
        "turns": results,
    }
    write_json(args.out, report)

    print(f"\n{'mode':<6} {'turns':>5} {'answered':>8} {'early':>5} {'v2v p50':>8} {'v2v p95':>8}")
    for m in ("ours", "stock"):
        s = summary[m]
        print(f"{m:<6} {s['turns']:>5} {s['answered']:>8} {s['answered_early']:>5} "
              f"{s['voice_to_voice_p50_ms']!s:>8} {s['voice_to_voice_p95_ms']!s:>8}")  # fmt: skip
    print(
        "ours, per-stage p50 ms: "
        + ", ".join(f"{k} {v}" for k, v in summary["ours"]["stage_p50_ms"].items())
    )
    print(f"stock/ours voice-to-voice p50: {ratio}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
