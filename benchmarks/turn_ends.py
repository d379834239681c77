"""Where every corpus clip's turns end, at compute pace: the check that a change to turn-taking
which should change nothing (a refactor) changes nothing.

Each clip of the corpus sets is one call at compute pace through the real turn detector,
streaming recognition and the conversation's LLM stage (the default model in process, which
judges the words at each pause), as ``heard(words=True)`` in
tests/turns/test_end_of_turn.py runs them; the clips of ``backchannel/`` are said 0.5 s
into a bot's answer (a stand-in bot that talks from the first audio), as a caller's
acknowledgement is, so the holds, the overlap's words and barge-ins are exercised too. Per
clip it writes each turn end (compute-clock time, reason, value, the words it read), the
frames the detector pushed (time and kind) and the finals, as JSON.

    nice -n 15 .venv/bin/python -m benchmarks.turn_ends --out runs/turns/before.json
    .venv/bin/python -m benchmarks.turn_ends --diff runs/turns/before.json runs/turns/after.json

``--diff`` prints one line per clip whose turn ends (time, reason, value) differ, and a
count of clips, turns and differences; exit status 1 when any differ.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
from pipecat.frames.frames import (
    BotStartedSpeakingFrame,
    Frame,
    InputAudioRawFrame,
    InterruptionFrame,
    UserStartedSpeakingFrame,
    UserStoppedSpeakingFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor

from agent import model_store
from agent.audio import load_audio
from agent.clock import CallClock, ComputeClock
from agent.evaluation.transcribe import TranscriptCollector, TranscriptEvent
from agent.frames import (
    HoldBotAudioFrame,
    OverlapCheckFrame,
    SpeechLullFrame,
    SpeechPausedFrame,
    TurnEndReasonFrame,
)
from agent.llm.context import UserTurnAggregator
from agent.llm.engines.chat import InProcessLlama
from agent.llm.service import StreamingLLM
from agent.pipeline import run_pipeline
from agent.recognition.streaming_stt import StreamingWhisperSTT
from agent.recognition.whisper_decoder import RATE, WhisperDecoder
from agent.settings import Settings
from agent.timing.call_recorder import CallRecorder
from agent.transports.replay import ReplayInput, ReplayTurn
from agent.turns.detector import TurnDetector
from agent.turns.vad import TurnModels
from tests.support.clips import CORPUS

SETS = ("main", "pauses", "short", "phone", "backchannel", "dictation")
OVER_THE_BOT = ("backchannel",)  # said while the bot talks
# The answers are not what is checked, and at compute pace the call waits for each whole one.
LLM_CHANGES = {"keepalive_secs": 0, "max_tokens": 4}
# What the detector pushes downstream, noted with the time it passed.
PUSHED = (
    TurnEndReasonFrame,
    UserStartedSpeakingFrame,
    UserStoppedSpeakingFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
    SpeechPausedFrame,
    SpeechLullFrame,
    HoldBotAudioFrame,
    OverlapCheckFrame,
    InterruptionFrame,
)


class DetectorTap(FrameProcessor):
    """Right below the detector: notes what it pushed, and when on the call's clock."""

    def __init__(self, clock: CallClock, frames: list, ends: list) -> None:
        super().__init__()
        self._clock, self._frames, self._ends = clock, frames, ends

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if direction == FrameDirection.DOWNSTREAM and isinstance(frame, PUSHED):
            at = round(self._clock.now_ms(), 1)
            name = type(frame).__name__
            if isinstance(frame, HoldBotAudioFrame):
                name += f"(hold={frame.hold},before_answer={frame.before_answer})"
            self._frames.append([at, name])
            if isinstance(frame, TurnEndReasonFrame):
                self._ends.append(
                    {"at_ms": at, "reason": frame.reason, "value": frame.value,
                     "words": frame.words, "goes_on": frame.goes_on, "text": frame.text}
                )  # fmt: skip
        await self.push_frame(frame, direction)


class TalkingBot(FrameProcessor):
    """A stand-in for the bot (a fake: no voice here) that talks from the call's first audio."""

    def __init__(self) -> None:
        super().__init__()
        self._talking = False

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, InputAudioRawFrame) and not self._talking:
            self._talking = True
            await self.push_frame(BotStartedSpeakingFrame(), FrameDirection.UPSTREAM)
        await self.push_frame(frame, direction)


def one_clip(corpus: Path, clip: str, decoder: WhisperDecoder, engine: InProcessLlama) -> dict:
    """One clip as one call at compute pace: its turn ends, the detector's frames, finals."""
    settings = Settings()
    llm_settings = settings.llm.model_copy(update=LLM_CHANGES)
    clock = ComputeClock()
    frames: list = []
    ends: list = []
    events: list[TranscriptEvent] = []
    audio = load_audio(corpus / clip, RATE)
    over_the_bot = clip.split("/")[0] in OVER_THE_BOT
    if over_the_bot:
        silence = np.zeros(RATE // 2, np.int16)
        audio = np.concatenate([silence, audio, silence, silence])
    pipeline = Pipeline(
        [
            ReplayInput(
                [ReplayTurn(clip, audio)],
                clock,
                CallRecorder(RATE),
                rate=RATE,
                answer_timeout_secs=5,
            ),  # fmt: skip
            TurnDetector(settings.turn, TurnModels.load(), clock, rate=RATE, words_judged=True),
            DetectorTap(clock, frames, ends),
            StreamingWhisperSTT(decoder, settings.asr, clock, rate=RATE),
            UserTurnAggregator(LLMContext()),
            StreamingLLM(engine, llm_settings, clock),
            TranscriptCollector(clip, clock, events),
            *([TalkingBot()] if over_the_bot else []),
        ]
    )
    asyncio.run(run_pipeline(pipeline, rate=RATE))
    finals = [e.text for e in events if e.kind == "final"]
    return {"ends": ends, "frames": frames, "finals": finals}


def clips(corpus: Path, sets: list[str]) -> list[str]:
    """The sets' clips taken in turn (a run stopped early has clips of every set)."""
    each = [[f"{s}/{p.name}" for p in sorted((corpus / s).glob("*.wav"))] for s in sets]
    return [c for row in itertools.zip_longest(*each) for c in row if c is not None]


def run(corpus: Path, sets: list[str], out: Path) -> None:
    settings = Settings()
    decoder = WhisperDecoder.from_settings(settings.asr, settings.models_dir)
    gguf = model_store.resolve(settings.llm.model, "llm", settings.models_dir)
    engine = InProcessLlama(gguf, settings.llm.model_copy(update=LLM_CHANGES))
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    result: dict = {"commit": commit, "clips": {}}
    if out.exists():  # a run stopped early goes on where it stopped
        result["clips"] = json.loads(out.read_text())["clips"]
    out.parent.mkdir(parents=True, exist_ok=True)
    for clip in clips(corpus, sets):
        if clip in result["clips"]:
            continue
        result["clips"][clip] = one_clip(corpus, clip, decoder, engine)
        ends = result["clips"][clip]["ends"]
        print(clip, [(e["at_ms"], e["reason"], e["value"]) for e in ends], flush=True)
        out.write_text(json.dumps(result, indent=1))  # what has run so far survives a stop


def end_key(end: dict) -> tuple:
    return end["at_ms"], end["reason"], end["value"]


def diff(before: dict, after: dict) -> tuple[list[str], list[str]]:
    """The clips both runs have, and one line per clip whose turn ends or detector frames
    differ."""
    both = sorted(set(before["clips"]) & set(after["clips"]))
    lines: list[str] = []
    for clip in both:
        was, now = before["clips"][clip], after["clips"][clip]
        a, b = [end_key(e) for e in was["ends"]], [end_key(e) for e in now["ends"]]
        if a != b:
            lines.append(f"{clip}: turn ends {a} -> {b}")
        elif was["frames"] != now["frames"]:
            lines.append(f"{clip}: same turn ends, detector frames differ")
    return both, lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("runs/turns/turn_ends.json"))
    parser.add_argument("--sets", default=",".join(SETS), help="comma-separated corpus sets")
    parser.add_argument("--corpus", type=Path, default=CORPUS, help="the corpus folder")
    parser.add_argument("--diff", nargs=2, type=Path, metavar=("BEFORE", "AFTER"))
    args = parser.parse_args(argv)
    if args.diff:
        before, after = (json.loads(p.read_text()) for p in args.diff)
        both, lines = diff(before, after)
        print("\n".join(lines))
        turns = sum(len(before["clips"][c]["ends"]) for c in both)
        per_set = ", ".join(f"{s} {sum(c.startswith(s + '/') for c in both)}" for s in SETS)
        alone = len(set(before["clips"]) ^ set(after["clips"]))
        print(f"{len(both)} clips in both runs ({per_set}), {turns} turn ends, "
              f"{len(lines)} clips differ; {alone} clips in one run only")  # fmt: skip
        return 1 if lines else 0
    sets = [s for s in args.sets.split(",") if s]
    unknown = [s for s in sets if not (args.corpus / s).is_dir()]
    if unknown:
        print(f"no corpus set {', '.join(unknown)} under {args.corpus}: pass --corpus DIR, or")
        print(f"--sets from {', '.join(SETS)}")
        return 2
    run(args.corpus, sets, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
