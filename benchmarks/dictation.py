"""Numbers read out, offline and streaming, per clip of the corpus's `dictation/` set.

For each clip, on the wideband or through the phone codec: the digits faster-whisper's own
offline ``transcribe()`` keeps in order (its defaults: beam 5, 30 s windows, no temperature
fallback), and those the streaming recogniser's finals keep, played through the turn
detector at compute pace (the same on any machine), with whether one final holds the whole
number and the finals shorter than their turn's last interim. ``--options`` instead decodes
each whole clip offline with decoder options (a prompt or hotwords of digits, temperature
fallback) and with the streaming decoder's own single pass, for digits kept and time.

    .venv/bin/python -m benchmarks.dictation [--line phone] [--options] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from agent.audio import load_audio
from agent.clock import ComputeClock
from agent.evaluation.grading import in_order
from agent.evaluation.text import word_count
from agent.evaluation.transcribe import TranscriptEvent, transcribe_stream
from agent.recognition.numbers import spoken_digits
from agent.recognition.whisper_decoder import RATE, WhisperDecoder
from agent.settings import Settings
from agent.transports.g711 import through_phone_line
from agent.transports.replay import ReplayTurn
from benchmarks.results import write_json
from tests.support.clips import CORPUS

DICTATION = CORPUS / "dictation"
PROMPT = "My number is 0 1 2 3, 4 5 6, 7 8 9."  # digits written as digits, in groups


def shorter_finals(events: list[TranscriptEvent]) -> int:
    """Finals with fewer words than their turn's last interim."""
    lost, last = 0, ""
    for event in events:
        if event.kind == "interim":
            last = event.text
        elif event.kind == "final":
            lost += word_count(event.text) < word_count(last)
            last = ""
    return lost


def decoders(decoder: WhisperDecoder) -> dict[str, Callable[[np.ndarray], str]]:
    """Each way of decoding a whole clip that ``--options`` compares."""

    def offline(**options: object) -> Callable[[np.ndarray], str]:
        def run(audio: np.ndarray) -> str:
            kwargs = {"language": "en", "condition_on_previous_text": False, "temperature": 0.0}
            segments, _ = decoder.model.transcribe(audio, **{**kwargs, **options})
            return " ".join(s.text.strip() for s in segments)

        return run

    return {
        "offline (eval's yardstick)": offline(),
        "offline, temperature fallback": offline(temperature=[0.0, 0.2, 0.4, 0.6, 0.8, 1.0]),
        "offline, initial prompt of digits": offline(initial_prompt=PROMPT),
        "offline, hotwords of digits": offline(hotwords="0 1 2 3 4 5 6 7 8 9"),
        "one pass, greedy (streaming's decoder)": lambda audio: decoder.transcribe(audio).text,
        "one pass, beam 5": lambda audio: decoder.transcribe(audio, beam_size=5).text,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--line", choices=("wideband", "phone"), default="wideband")
    parser.add_argument("--options", action="store_true", help="compare decoder options")
    parser.add_argument("--out", type=Path, default=Path("runs/bench_dictation.json"))
    args = parser.parse_args()
    settings = Settings()
    if args.line == "phone":
        settings = settings.for_phone()
    decoder = WhisperDecoder.from_settings(settings.asr, settings.models_dir)
    rows = [json.loads(x) for x in (DICTATION / "manifest.jsonl").read_text().splitlines()]
    clips = []
    for row in rows:
        samples = load_audio(DICTATION / row["file"], RATE)
        if args.line == "phone":
            samples = through_phone_line(samples)
        clips.append((row, samples))
    results: dict[str, object] = {"line": args.line}
    if args.options:
        for name, decode in decoders(decoder).items():
            kept, secs = 0, 0.0
            for row, samples in clips:
                start = time.perf_counter()
                text = decode(samples.astype(np.float32) / 32768)
                secs += time.perf_counter() - start
                kept += in_order(spoken_digits(text), row["digits"])
            total = sum(len(row["digits"]) for row, _ in clips)
            print(f"{name:40} digits in order {kept}/{total}, {secs:.1f} s", flush=True)
            results[name] = {"kept": kept, "digits": total, "secs": round(secs, 1)}
        write_json(args.out, results)
        return
    per_clip = []
    for row, samples in clips:
        offline = decoder.offline(samples.astype(np.float32) / 32768)
        turn = ReplayTurn(row["file"], samples)
        events = asyncio.run(transcribe_stream(decoder, turn, settings, ComputeClock()))
        finals = [e.text for e in events if e.kind == "final"]
        heard = [spoken_digits(text) for text in finals]
        clip = {
            "clip": row["file"],
            "digits": row["digits"],
            "offline_kept": in_order(spoken_digits(offline), row["digits"]),
            "streaming_kept": in_order("".join(heard), row["digits"]),
            "whole": row["digits"] in heard,
            "shorter_finals": shorter_finals(events),
            "finals": finals,
        }
        print(json.dumps(clip), flush=True)
        per_clip.append(clip)
    results["clips"] = per_clip
    write_json(args.out, results)


if __name__ == "__main__":
    main()
