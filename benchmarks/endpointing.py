"""End-of-turn trade-off on real speech with pauses: how fast the turn ends, how often too early.

Inputs (real speech, true ends known): the whole JFK passage (jfk_part1 + jfk_part2, the
original recording: pauses of about 1.1, 1.0 and 0.5 s inside one turn), jfk_part2 alone,
and two-sentence turns made of real clips (ldc93s1 and new_home_in_the_stars, speech only)
joined by a silence of 0.4 to 1.3 s. Each turn is followed by 4 s of silence.

``--line phone`` plays the same turns as a phone call hears them: 8 kHz mu-law, through the
phone bridge's own resamplers (no sound above 3.7 kHz, which Smart Turn was not trained on).

For each setting in the grid (VAD stop window x Smart Turn on/off x its lean threshold x max
silence; each axis may be narrowed on the command line) the real
TurnDetector (Silero VAD, Smart Turn v3 with the pause-transcript rule, fed by the real
streaming recogniser) hears the turns on an audio clock, as fast as the CPU allows: the
feeder waits while the detector judges a stop, and the judging's wall time is added to
that turn end (as if the audio had kept coming meanwhile). Reported per setting:
``endpointing`` p50/p95 (true speech end -> turn end) and false turn ends (a turn end
before the true end, inside a mid-turn pause) as a count and per turn, split into the five
pauses inside JFK's sentence and the eight pauses between two finished sentences (where
calling the turn over is defensible; a caller may still go on).

    .venv/bin/python -m benchmarks.endpointing [--out runs/bench_endpointing.json]
    .venv/bin/python -m benchmarks.endpointing --line phone --stop-windows 0.15 \
        --max-silences 1.5 --smart-turn on --leans 0.3,0.2,0.1,0.05
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pipecat.frames.frames import (
    EndWorkerFrame,
    Frame,
    InputAudioRawFrame,
    StartFrame,
    UserStoppedSpeakingFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor

from agent.audio import speech_bounds
from agent.clock import CallClock
from agent.pipeline import run_pipeline
from agent.recognition.streaming_stt import StreamingWhisperSTT
from agent.recognition.whisper_decoder import RATE, WhisperDecoder
from agent.settings import Settings, TurnSettings
from agent.timing.budget import rounded_percentile
from agent.transports.g711 import through_phone_line
from agent.turns.detector import TurnDetector
from agent.turns.vad import TurnModels
from benchmarks.results import write_json
from tests.support.clips import load_clip

FRAME = RATE * 20 // 1000
TAIL_SECS = 4.0
JOIN_PAUSES = (0.4, 0.7, 1.0, 1.3)
STOP_WINDOWS = (0.1, 0.15, 0.2, 0.3)
MAX_SILENCES = (0.8, 1.5, 3.0)
JOINS = 2 * len(JOIN_PAUSES)
MID_SENTENCE_PAUSES = 5  # jfk_whole: after "Americans", "ask not", "for you"; jfk_part2: 2


@dataclass
class Turn:
    name: str
    samples: np.ndarray
    start: int  # first speech sample
    end: int  # last speech sample: the true end of the turn


def _speech(name: str) -> np.ndarray:
    samples = load_clip(name, RATE)
    bounds = speech_bounds(samples, RATE)
    assert bounds is not None, name
    return samples[bounds[0] : bounds[1]]


def build_turns(line: str = "wide") -> list[Turn]:
    """Real speech with known true ends and mid-turn pauses, heard on a wide or phone line."""
    lead = np.zeros(RATE // 2, dtype=np.int16)
    jfk = [load_clip(f, RATE) for f in ("jfk_part1.wav", "jfk_part2.wav")]
    whole = [("jfk_whole", np.concatenate(jfk)), ("jfk_part2", jfk[1])]
    ldc, home = _speech("ldc93s1.wav"), _speech("new_home_in_the_stars.wav")
    joined = [
        (f"{name}+{pause}s", np.concatenate([lead, a, np.zeros(int(pause * RATE), np.int16), b]))
        for pause in JOIN_PAUSES
        for name, a, b in (("ldc93s1+new_home", ldc, home), ("new_home+ldc93s1", home, ldc))
    ]
    turns = []
    for name, samples in whole + joined:
        if line == "phone":
            samples = through_phone_line(samples)
        bounds = speech_bounds(samples, RATE)
        assert bounds is not None, name
        tail = np.zeros(int(TAIL_SECS * RATE), dtype=np.int16)
        turns.append(Turn(name, np.concatenate([samples, tail]), *bounds))
    return turns


class AudioClock(CallClock):
    """Call time = audio pushed so far (plus judging time, see Feeder)."""

    def __init__(self) -> None:
        super().__init__()
        self.samples = 0

    def now_ms(self) -> float:
        return round(self.samples * 1000 / RATE, 1)


class Feeder(FrameProcessor):
    """Pushes the turns frame by frame on the audio clock; records each turn end."""

    def __init__(self, turns: list[Turn], clock: AudioClock, detector: TurnDetector) -> None:
        super().__init__()
        self._turns, self._clock, self._detector = turns, clock, detector
        self.turn_ends_ms: list[float] = []
        self.judging_ms: list[float] = []
        self._judge_started: float | None = None
        self.heard = asyncio.Event()

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, UserStoppedSpeakingFrame):
            judged = 0.0
            if self._judge_started is not None:
                judged = (time.perf_counter() - self._judge_started) * 1000
            self.turn_ends_ms.append(self._clock.now_ms() + judged)
            return
        await self.push_frame(frame, direction)
        if isinstance(frame, StartFrame):
            self.create_task(self._feed())

    async def _feed(self) -> None:
        audio = np.concatenate([t.samples for t in self._turns])
        for i in range(0, len(audio) - FRAME + 1, FRAME):
            self._clock.samples = i
            pcm = audio[i : i + FRAME].tobytes()
            self.heard.clear()
            await self.push_frame(InputAudioRawFrame(audio=pcm, sample_rate=RATE, num_channels=1))
            # Pipecat queues frames between processors: wait until this frame went through
            # (the detector has then finished the one before; 20 ms of slack).
            await self.heard.wait()
            if self._detector.deciding:
                self._judge_started = time.perf_counter()
                while self._detector.deciding:
                    await asyncio.sleep(0.002)
                self.judging_ms.append((time.perf_counter() - self._judge_started) * 1000)
                await asyncio.sleep(0.01)  # let the decision's frames arrive
                self._judge_started = None
        await self.push_frame(EndWorkerFrame(), FrameDirection.UPSTREAM)


class Heard(FrameProcessor):
    """The end of the pipeline: tells the feeder each audio frame has gone through."""

    def __init__(self, feeder: Feeder) -> None:
        super().__init__()
        self._feeder = feeder

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, InputAudioRawFrame):
            self._feeder.heard.set()
        await self.push_frame(frame, direction)


def score(turns: list[Turn], ends_ms: list[float]) -> dict:
    """Endpointing per turn (first end after the true end) and ends before the true end."""
    endpointing, false_ends, by_turn, offset = [], 0, {}, 0
    for turn in turns:
        start_ms = (offset + turn.start) * 1000 / RATE
        true_end_ms = (offset + turn.end) * 1000 / RATE
        stop_ms = (offset + len(turn.samples)) * 1000 / RATE
        by_turn[turn.name] = sum(start_ms < t < true_end_ms for t in ends_ms)
        false_ends += by_turn[turn.name]
        after = [t - true_end_ms for t in ends_ms if true_end_ms <= t < stop_ms]
        endpointing.append(after[0] if after else None)
        offset += len(turn.samples)
    heard = [x for x in endpointing if x is not None]
    return {
        "endpointing_ms": {
            "p50": rounded_percentile(heard, 50),
            "p95": rounded_percentile(heard, 95),
        },
        "false_turn_ends": false_ends,
        "false_turn_ends_per_turn": round(false_ends / len(turns), 3),
        "false_turn_ends_mid_sentence": sum(n for k, n in by_turn.items() if k.startswith("jfk")),
        "false_turn_ends_between_sentences": sum(
            n for k, n in by_turn.items() if not k.startswith("jfk")
        ),
        "false_turn_ends_by_turn": by_turn,
        "turns_never_ended": len(endpointing) - len(heard),
    }


async def run_one(
    turns: list[Turn], turn: TurnSettings, decoder: WhisperDecoder, settings: Settings
) -> dict:
    clock = AudioClock()
    # Silence counted on the audio alone: a loaded machine may feed slower than real time,
    # and the live wall-clock fallback would then end turns inside their pauses.
    detector = TurnDetector(turn, TurnModels.load(), clock, rate=RATE, audio_clock_only=True)
    feeder = Feeder(turns, clock, detector)
    stages: list[FrameProcessor] = [feeder, detector]
    if turn.smart_turn:  # its pause-transcript rule needs the recogniser
        stages.append(StreamingWhisperSTT(decoder, settings.asr, clock, rate=RATE))
    await run_pipeline(Pipeline([*stages, Heard(feeder)]), rate=RATE)
    result = score(turns, feeder.turn_ends_ms)
    result["judging_ms_p50"] = rounded_percentile(feeder.judging_ms, 50)
    return result


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",")]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("runs/bench_endpointing.json"))
    parser.add_argument("--line", choices=("wide", "phone"), default="wide")
    parser.add_argument("--stop-windows", type=_floats, default=STOP_WINDOWS)
    parser.add_argument("--max-silences", type=_floats, default=MAX_SILENCES)
    parser.add_argument("--smart-turn", choices=("on", "off", "both"), default="both")
    parser.add_argument("--leans", type=_floats, help="Smart Turn lean thresholds (default: ours)")
    args = parser.parse_args()
    settings = Settings()
    smart_turn = {"on": (True,), "off": (False,), "both": (False, True)}[args.smart_turn]
    leans = args.leans or [settings.turn.smart_turn_lean]
    decoder = WhisperDecoder.from_settings(settings.asr, settings.models_dir)
    turns = build_turns(args.line)
    rows = []
    grid = itertools.product(args.stop_windows, smart_turn, leans, args.max_silences)
    for stop, smart, lean, max_silence in grid:
        if not smart and lean != leans[0]:
            continue  # the lean threshold is Smart Turn's
        row = {"vad_stop_secs": stop, "smart_turn": smart, "smart_turn_lean": lean,
               "max_silence_secs": max_silence}  # fmt: skip
        turn = settings.turn.model_copy(update=row)
        row |= await run_one(turns, turn, decoder, settings)
        rows.append(row)
        e = row["endpointing_ms"]
        print(
            f"stop {stop:.2f}  smart_turn {f'on (lean {lean})' if smart else 'off'}"
            f"  max_silence {max_silence}"
            f"  endpointing p50 {e['p50']} p95 {e['p95']} ms"
            f"  false ends {row['false_turn_ends']} ({row['false_turn_ends_per_turn']}/turn;"
            f" mid-sentence {row['false_turn_ends_mid_sentence']} of {MID_SENTENCE_PAUSES},"
            f" between sentences {row['false_turn_ends_between_sentences']} of {JOINS})",
            flush=True,
        )
    report = {
        "line": args.line,
        "turns": [{"name": t.name, "true_end_s": round(t.end / RATE, 2)} for t in turns],
        "defaults": settings.turn.model_dump(),
        "grid": rows,
    }
    write_json(args.out, report)


if __name__ == "__main__":
    asyncio.run(main())
