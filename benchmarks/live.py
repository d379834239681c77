"""Live-call benchmark: voice-to-voice over /phone on loopback vs replay, and barge-in latency.

One process loads the models and the LLM engine once, then, round by round:
  1. replays the clips as turns of one call (the replay contract's voice_to_voice);
  2. replays them again as a phone line carries them (8 kHz mu-law both ways, the bridge's
     own resamplers) with a phone call's settings: the same turns as 3 minus the transport,
     so the difference between 2 and 3 is what the phone endpoint itself costs;
  3. plays the same clips as turns of one phone call through a real websocket server on
     loopback (a simulated Twilio caller streaming 8 kHz mu-law in real time), measured
       - by the server (turn records: from the VAD's speech end, an estimate), and
       - by the caller (from the clip's true speech end as sent, to the first bot audio
         received: codec, socket and pacing included);
  Paired per turn (same clip, same round): phone (caller) minus replay of the phone audio,
  and phone minus the plain replay. Then it
  4. interrupts the bot N times: the caller asks, and once the answer's audio is arriving
     talks over it; barge-in latency = caller speech start (as sent) -> the bot's audio
     stopped at the caller (the end of the last audio it received before the ``clear``:
     the server holds the audio at the first speech window, then confirms with ``clear``),
     also to the ``clear`` itself, and the server's own ``barge_in_ms`` (VAD speech start ->
     bot audio stopped).
Prints a table and writes JSON (default /tmp/bench_live.json).

    .venv/bin/python -m benchmarks.live [--rounds 2] [--barge-ins 6] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from agent.audio import speech_bounds
from agent.live.call import Runtime
from agent.live.server import CallServer, serve_calls
from agent.pipeline import AgentModels, llm_engine
from agent.replay import replay_call
from agent.reports.load import load_run
from agent.settings import Settings
from agent.timing.budget import load_budget, rounded_percentile
from agent.timing.record import TurnRecord
from agent.transports.g711 import PHONE_RATE, through_phone_line
from agent.transports.replay import ReplayTurn
from benchmarks.results import write_json
from tests.support.caller import PhoneCaller
from tests.support.clips import load_clip, whole_sentences

CLIPS = whole_sentences()
RATE = 16000
ANSWER_TIMEOUT = 40.0
QUIET_SECS = 1.2  # no bot audio for this long: the answer is over


def stats(values: list[float]) -> dict[str, Any]:
    xs = [v for v in values if v is not None]
    return {
        "n": len(xs),
        "p50": rounded_percentile(xs, 50),
        "p95": rounded_percentile(xs, 95),
        "values": [round(v, 1) for v in xs],
    }


def records(folder: Path) -> list[TurnRecord]:
    return load_run(folder)


async def phone_turns(url: str, clips: list[np.ndarray]) -> list[float | None]:
    """One call, one clip per turn; the caller's own voice-to-voice for each turn (ms)."""
    measured: list[float | None] = []
    async with PhoneCaller(url) as phone:
        await asyncio.sleep(0.5)
        for samples in clips:
            end = speech_bounds(samples, RATE)[1]
            utterance = phone.speak(samples)
            await utterance.done.wait()
            spoke_until = utterance.sent_time(end)
            reply = await phone.wait_for("media", spoke_until, ANSWER_TIMEOUT)
            measured.append(None if reply is None else (reply.at - spoke_until) * 1000)
            await phone.wait_quiet(QUIET_SECS, ANSWER_TIMEOUT)
        await phone.hang_up()
    return measured


async def barge_ins(url: str, question: np.ndarray, interruption: np.ndarray, n: int) -> list:
    """Ask, talk over the answer once its audio arrives; one dict per attempt.

    ``latency_ms``: caller speech start (as sent) -> the end of the last bot audio received
    before the ``clear`` (when the caller stopped hearing the bot); ``clear_ms``: to the
    ``clear`` itself; both None when no clear came. ``bot_talking_ms``: how long the bot's
    audio kept arriving after the caller started talking when there was no clear (a short
    answer that ended first has nothing to cut).
    """
    start = speech_bounds(interruption, RATE)[0]
    attempts: list[dict[str, Any]] = []
    async with PhoneCaller(url) as phone:
        await asyncio.sleep(0.5)
        for _ in range(n):
            asked = phone.speak(question)
            await asked.done.wait()
            reply = await phone.wait_for("media", asked.sent_at[-1], ANSWER_TIMEOUT)
            if reply is None:
                attempts.append({"latency_ms": None, "answered": False})
                continue
            await asyncio.sleep(0.2)
            cut = phone.speak(interruption)
            clear = await phone.wait_for("clear", reply.at, 15)
            await cut.done.wait()
            spoke = cut.sent_time(start)
            answer = [r for r in phone.media_after(reply.at) if r.at < spoke + 1.0]
            heard = [r for r in answer if clear is not None and r.at <= clear.at]
            stopped = heard[-1].at + len(heard[-1].audio) / PHONE_RATE if heard else None
            attempts.append({
                "answered": True,
                "latency_ms": None if stopped is None else round((stopped - spoke) * 1000, 1),
                "clear_ms": None if clear is None else round((clear.at - spoke) * 1000, 1),
                "answer_audio_before_cut_s": round(sum(len(r.audio) for r in answer) / 8000, 2),
                "bot_talking_ms": None if clear is not None or not answer
                else round((answer[-1].at - spoke) * 1000, 1),
            })  # fmt: skip
            await phone.wait_quiet(QUIET_SECS, ANSWER_TIMEOUT)
        await phone.hang_up()
    return attempts


async def replay_round(
    runtime: Runtime, settings: Settings, clips: list[np.ndarray], out: Path
) -> list[TurnRecord]:
    turns = [ReplayTurn(name=n, samples=c) for n, c in zip(CLIPS, clips, strict=True)]
    await replay_call(
        turns, out, settings=settings, models=runtime.models, engine=runtime.engine,
        budget=runtime.budget,
    )  # fmt: skip
    return records(out)


def paired(a: list[float | None], b: list[float | None]) -> dict[str, Any]:
    """Turn-by-turn differences a - b (same clip, same round)."""
    return stats([x - y for x, y in zip(a, b, strict=True) if x is not None and y is not None])


async def bench(args: argparse.Namespace, runtime: Runtime, work: Path) -> dict[str, Any]:
    clips = [load_clip(name, RATE) for name in CLIPS]
    phone_clips = [through_phone_line(c) for c in clips]
    phone_settings = runtime.settings.for_phone()
    kinds = ("replay", "replay_phone_audio", "phone_server", "phone_caller")
    every: dict[str, list] = {k: [] for k in kinds}  # every turn's voice-to-voice
    pairs: dict[str, list] = {k: [] for k in kinds}  # per clip, None in a split round
    transport_out: list[float | None] = []  # the phone output's own stage

    server = CallServer(runtime, work / "calls", say=lambda _line: None)
    stop = asyncio.Event()
    ready: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    serving = asyncio.create_task(
        serve_calls(server, "127.0.0.1", 0, stop=stop, on_ready=ready.set_result)
    )
    url = f"ws://127.0.0.1:{await ready}/phone"
    try:
        for r in range(args.rounds):
            started = time.monotonic()
            replayed = await replay_round(runtime, runtime.settings, clips, work / f"replay{r}")
            replayed_phone = await replay_round(
                runtime, phone_settings, phone_clips, work / f"replay_phone{r}"
            )
            caller = await phone_turns(url, clips)
            phoned = records(sorted((work / "calls").glob("*-phone-*"))[-1])
            print(f"round {r + 1}: replay, phone-audio replay, phone call "
                  f"in {time.monotonic() - started:.0f} s")  # fmt: skip
            measured = {
                "replay": [t.voice_to_voice_ms for t in replayed],
                "replay_phone_audio": [t.voice_to_voice_ms for t in replayed_phone],
                "phone_server": [t.voice_to_voice_ms for t in phoned],
                "phone_caller": caller,
            }
            transport_out += [t.stages["transport_out"] for t in phoned]
            for key, values in measured.items():
                every[key] += values
                if len(values) != len(clips):  # a turn split in two or merged: not paired
                    print(f"  {key}: {len(values)} turns for {len(clips)} clips, not paired")
                    values = [None] * len(clips)
                pairs[key] += values

        started = time.monotonic()
        question = load_clip("ldc93s1.wav", RATE)
        home = load_clip("new_home_in_the_stars.wav", RATE)
        interruption = home[max(0, speech_bounds(home, RATE)[0] - RATE // 10) :]
        attempts = await barge_ins(url, question, interruption, args.barge_ins)
        barge_call = sorted((work / "calls").glob("*-phone-*"))[-1]
        print(f"barge-ins: {len(attempts)} in {time.monotonic() - started:.0f} s")
    finally:
        stop.set()
        await serving

    names = CLIPS * args.rounds
    server_barge = [r.barge_in_ms for r in records(barge_call) if r.interrupted]
    return {
        "clips": names,
        "voice_to_voice_ms": {k: stats(v) for k, v in every.items()},
        "phone_minus_replay_ms": {
            "same_phone_audio": paired(pairs["phone_caller"], pairs["replay_phone_audio"]),
            "wideband_replay": paired(pairs["phone_caller"], pairs["replay"]),
        },
        "phone_transport_out_ms": stats(transport_out),
        "barge_in_ms": {
            "caller": stats([a["latency_ms"] for a in attempts]),
            "caller_clear": stats([a["clear_ms"] for a in attempts if a.get("answered")]),
            "server": stats(server_barge),
            "attempts": attempts,
            "interrupted": sum(1 for a in attempts if a["latency_ms"] is not None),
        },
        "per_turn": [
            {"clip": n, **{k: v[i] for k, v in pairs.items()}} for i, n in enumerate(names)
        ],
        "smart_turn_lean": {
            "wideband": runtime.settings.turn.smart_turn_lean,
            "phone": phone_settings.turn.smart_turn_lean,
        },  # fmt: skip
        "engine": runtime.settings.llm.engine,
        "asr": runtime.settings.asr.model,
    }


def show(result: dict[str, Any]) -> None:
    print(f"\n{'voice-to-voice (ms)':<34}{'n':>4}{'p50':>9}{'p95':>9}")
    for name, label in (("replay", "replay (exact speech end)"),
                        ("phone_server", "phone, server's turn records"),
                        ("replay_phone_audio", "replay of the phone audio"),
                        ("phone_caller", "phone, measured by the caller")):  # fmt: skip
        s = result["voice_to_voice_ms"][name]
        print(f"{label:<34}{s['n']:>4}{s['p50'] or 0:>9.0f}{s['p95'] or 0:>9.0f}")
    for name, label in (("same_phone_audio", "phone - replay of phone audio"),
                        ("wideband_replay", "phone - replay")):  # fmt: skip
        s = result["phone_minus_replay_ms"][name]
        print(f"{label + ', paired':<34}{s['n']:>4}{s['p50'] or 0:>9.0f}{s['p95'] or 0:>9.0f}")
    s = result["phone_transport_out_ms"]
    print(f"{'phone transport_out stage':<34}{s['n']:>4}{s['p50'] or 0:>9.1f}{s['p95'] or 0:>9.1f}")
    b = result["barge_in_ms"]
    print(f"\n{'barge-in (ms)':<34}{'n':>4}{'p50':>9}{'p95':>9}   "
          f"({b['interrupted']}/{len(b['attempts'])} attempts cut the bot off)")  # fmt: skip
    for name, label in (("caller", "caller speech -> bot audio stopped"),
                        ("caller_clear", "caller speech -> clear received"),
                        ("server", "VAD speech start -> audio stopped")):  # fmt: skip
        s = b[name]
        print(f"{label:<34}{s['n']:>4}{s['p50'] or 0:>9.0f}{s['p95'] or 0:>9.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2, help="times the clip set is played")
    parser.add_argument("--barge-ins", type=int, default=6)
    parser.add_argument("--out", type=Path, default=Path("/tmp/bench_live.json"))
    parser.add_argument("--keep", type=Path, help="keep the replay and call folders here")
    args = parser.parse_args()
    settings = Settings()
    budget = load_budget(settings.budget_file, settings.budget_profile)
    models = AgentModels.load(settings)
    with llm_engine(settings) as engine, tempfile.TemporaryDirectory() as tmp:
        runtime = Runtime(settings=settings, models=models, engine=engine, budget=budget)
        result = asyncio.run(bench(args, runtime, args.keep or Path(tmp)))
    show(result)
    missed = [a for a in result["barge_in_ms"]["attempts"] if a.get("bot_talking_ms") is not None]
    for a in missed:
        print(
            f"  no clear: the bot's audio kept arriving {a['bot_talking_ms']:.0f} ms after the "
            f"caller started ({a['answer_audio_before_cut_s']} s of answer)"
        )
    write_json(args.out, result)
    print(f"\nwritten: {args.out}")


if __name__ == "__main__":
    main()
