"""Streaming recognition benchmark on the real speech clips.

For each clip, played at real-time pace through the turn detector and streaming recogniser
(as in a call): the final transcript, the ``stt_final`` stage (turn_end -> final
transcript), the gaps between interim transcripts during speech, and the decoder compute
per second of audio. Interim gaps count only while the caller speaks: a gap that spans a
VAD pause is not one. Baseline in the same run: faster-whisper's own offline
``transcribe()`` of each whole file with the same model (its defaults: beam 5, 30 s window).

    .venv/bin/python -m benchmarks.stt [--rounds 3] [--interval-ms N] [--asr-model NAME] \
        [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path

import jiwer
import numpy as np

from agent import model_store
from agent.evaluation.transcribe import TranscriptEvent, final_texts, transcribe_stream
from agent.recognition.whisper_decoder import RATE, WhisperDecoder
from agent.settings import Settings
from agent.timing.budget import rounded_percentile
from agent.transports.replay import ReplayTurn
from benchmarks.results import write_json
from tests.support import clips


def norm(text: str) -> str:
    return " ".join("".join(c if c.isalnum() or c in " '" else " " for c in text.lower()).split())


def speaking_gaps(events: list[TranscriptEvent]) -> list[float]:
    """Gaps between consecutive interims while the caller speaks (not across a VAD pause)."""
    gaps, last = [], None
    for e in events:
        if e.kind == "interim":
            if last is not None:
                gaps.append(e.at_ms - last)
            last = e.at_ms
        elif e.kind in ("pause", "turn_end"):
            last = None
    return gaps


class TimedDecoder(WhisperDecoder):
    """The decoder, adding up the time its passes take."""

    busy_secs = 0.0

    def transcribe(self, audio: np.ndarray, *args, **kwargs):  # type: ignore[override]
        start = time.perf_counter()
        try:
            return super().transcribe(audio, *args, **kwargs)
        finally:
            self.busy_secs += time.perf_counter() - start


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("runs/bench_stt.json"))
    parser.add_argument("--interval-ms", type=int, help="asr.interim_interval_ms to try")
    parser.add_argument("--asr-model", help="asr.model to try (a default name or a folder)")
    args = parser.parse_args()
    settings = Settings()
    if args.asr_model:
        settings.asr.model = args.asr_model
    if args.interval_ms:
        settings.asr.interim_interval_ms = args.interval_ms
    model_dir = model_store.resolve(settings.asr.model, "asr", settings.models_dir)
    decoder = TimedDecoder(
        model_dir, compute_type=settings.asr.compute_type, threads=settings.asr.threads,
        language=settings.asr.language,
    )  # fmt: skip
    manifest = list(clips.manifest().values())
    refs, ours, offline = [], [], []
    stt_final, interim_gaps, offline_ms, turns_per_clip = [], [], [], {}
    audio_secs = 0.0
    for round_no in range(args.rounds):
        for clip in manifest:
            samples = clips.load_clip(clip["file"], RATE)
            events = await transcribe_stream(decoder, ReplayTurn(clip["file"], samples), settings)
            finals = [e for e in events if e.kind == "final"]
            ends = [e for e in events if e.kind == "turn_end"]
            turns_per_clip.setdefault(clip["file"], []).append(len(finals))
            stt_final += [f.at_ms - t.at_ms for f, t in zip(finals, ends, strict=False)]
            interim_gaps += speaking_gaps(events)
            audio_secs += len(samples) / RATE
            refs.append(norm(clip["text"]))
            ours.append(norm(" ".join(final_texts(events))) or "<empty>")
            if round_no == 0:
                start = time.perf_counter()
                segments, _ = decoder.model.transcribe(
                    samples.astype(np.float32) / 32768.0, language=settings.asr.language
                )
                offline.append(norm("".join(s.text for s in segments)) or "<empty>")
                offline_ms.append((time.perf_counter() - start) * 1000)
    n = len(manifest)
    report = {
        "model": settings.asr.model,
        "clips": n,
        "rounds": args.rounds,
        "wer_streaming": round(jiwer.wer(refs, ours), 4),
        "wer_offline_transcribe": round(jiwer.wer(refs[:n], offline), 4),
        "stt_final_ms": {
            "p50": rounded_percentile(stt_final, 50),
            "p95": rounded_percentile(stt_final, 95),
            "n": len(stt_final),
        },
        "interim_interval_ms": settings.asr.interim_interval_ms,
        "interim_gap_ms": {
            "p50": rounded_percentile(interim_gaps, 50),
            "p95": rounded_percentile(interim_gaps, 95),
            "max": rounded_percentile(interim_gaps, 100),
            "n": len(interim_gaps),
        },
        "offline_transcribe_ms": {
            "p50": rounded_percentile(offline_ms, 50),
            "max": rounded_percentile(offline_ms, 100),
        },
        "decoder_compute_per_audio_sec": round(decoder.busy_secs / audio_secs, 3),
        "turns_per_clip": turns_per_clip,
        "transcripts": {"streaming": ours[:n], "offline": offline},
    }
    print(json.dumps({k: v for k, v in report.items() if k != "transcripts"}, indent=2))
    write_json(args.out, report)


if __name__ == "__main__":
    asyncio.run(main())
