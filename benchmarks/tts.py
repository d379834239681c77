"""Streaming synthesis benchmark: first-phrase size vs first_phrase + tts_ttfb, gaps, RTF.

For each chunking setting, the real LLM (llama.cpp in-process) answers the sample user
turns while the phrase chunker and Piper run on its live token stream, as in a call:
``first_phrase`` (first token -> first phrase released), ``tts_ttfb`` (phrase released ->
its audio ready), and for every later phrase whether its audio was ready before the
previous phrase finished playing (a gap the caller would hear). Also Piper's real-time
factor over all phrases. As in the pipeline, llama.cpp pauses decoding while the first
phrase is synthesised (``llm.pause_for_first_phrase``); two settings run without it too.

    .venv/bin/python -m benchmarks.tts [--rounds 2] [--out runs/bench_tts.json]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from agent import model_store
from agent.llm.engines.chat import InProcessLlama, Sampling, Usage
from agent.llm.prompt import prompt_messages
from agent.settings import Settings
from agent.synthesis.chunker import split_phrase
from agent.synthesis.piper_tts import PiperVoiceModel
from agent.synthesis.speakable import speakable
from agent.timing.budget import rounded_percentile
from benchmarks.results import write_json

RATE = 16000
USER_TURNS = [
    "And so my fellow Americans,",
    "ask not what your country can do for you, ask what you can do for your country.",
    "We must find a new home in the stars.",
    "She had your dark suit in greasy wash water all year.",
    "Can you tell me about the weather tomorrow?",
]
# (first_min_words, min_words, pause decoding for the first phrase)
SETTINGS = [
    (1, 6, True), (2, 6, True), (3, 6, True), (4, 6, True), (6, 8, True), (99, 99, True),
    (2, 6, False), (3, 6, False),
]  # fmt: skip


async def answer(
    llm: InProcessLlama, voice: PiperVoiceModel, pool: ThreadPoolExecutor, settings: Settings,
    user: str, first_min: int, min_words: int, pause: bool,
) -> dict:  # fmt: skip
    """One answer: chunk the live token stream, synthesise phrases in order off the loop."""
    loop = asyncio.get_running_loop()
    s = settings.llm
    messages = prompt_messages(s.opening, [{"role": "user", "content": user}], 4)
    buffer, first_token, phrases = "", None, []

    def synthesize(text: str, first: bool) -> tuple:
        """The phrase's audio and when it was ready (not when this loop got to look)."""
        try:
            return voice.synthesize(text, RATE), time.perf_counter()
        finally:
            if first:
                llm.pause_decoding(False)

    def release(text: str) -> None:
        spoken = speakable(text)
        if any(c.isalnum() for c in spoken):
            first, released = not phrases, time.perf_counter()
            llm.pause_decoding(first and pause)
            job = loop.run_in_executor(pool, synthesize, spoken, first)
            phrases.append((spoken, released, job))

    sampling = Sampling(temperature=0.2)
    async for item in llm.stream(messages, max_tokens=s.max_tokens, sampling=sampling):
        if isinstance(item, Usage):
            continue
        first_token = first_token or time.perf_counter()
        buffer += item
        while (end := split_phrase(buffer, not phrases, first_min, min_words)) is not None:
            release(buffer[:end])
            buffer = buffer[end:]
    release(buffer)
    if not phrases or first_token is None:
        return {}
    ready, audio_secs = [], []
    for _, _, job in phrases:
        audio, ready_at = await job
        ready.append(ready_at)
        audio_secs.append(len(audio) / RATE)
    # Playback: each phrase starts when ready and the previous one has finished.
    gaps, play_end = [], ready[0] + audio_secs[0]
    for k in range(1, len(phrases)):
        gaps.append(max(0.0, ready[k] - play_end))
        play_end = max(ready[k], play_end) + audio_secs[k]
    first_audio, _ = await phrases[0][2]
    return {
        "first_phrase_words": len(phrases[0][0].split()),
        "first_phrase_ms": (phrases[0][1] - first_token) * 1000,
        "tts_ttfb_ms": (ready[0] - phrases[0][1]) * 1000,
        "gaps_ms": [g * 1000 for g in gaps],
        "audio_secs": sum(audio_secs),
        "first_audio_secs": len(first_audio) / RATE,
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("runs/bench_tts.json"))
    args = parser.parse_args()
    settings = Settings()
    llm = InProcessLlama(
        model_store.resolve(settings.llm.model, "llm", settings.models_dir), settings.llm
    )
    voice = PiperVoiceModel.from_settings(settings.tts, settings.models_dir)
    voice.synthesize("Warm up.", RATE)
    pool = ThreadPoolExecutor(max_workers=1)

    start = time.perf_counter()
    sample = "I can help with that, and I will call you back tomorrow morning."
    rtf_audio = len(voice.synthesize(sample, RATE)) / RATE
    rtf = (time.perf_counter() - start) / rtf_audio

    report: dict = {"piper_rtf": round(rtf, 3), "settings": []}
    for first_min, min_words, pause in SETTINGS:
        rows = []
        for _ in range(args.rounds):
            for user in USER_TURNS:
                row = await answer(llm, voice, pool, settings, user, first_min, min_words, pause)
                if row:
                    rows.append(row)
        both = [r["first_phrase_ms"] + r["tts_ttfb_ms"] for r in rows]
        gaps = [g for r in rows for g in r["gaps_ms"]]
        report["settings"].append(
            {
                "first_min_words": first_min,
                "min_words": min_words,
                "pause_decoding": pause,
                "answers": len(rows),
                "first_phrase_words_p50": rounded_percentile(
                    [r["first_phrase_words"] for r in rows], 50
                ),
                "first_phrase_p50_ms": rounded_percentile([r["first_phrase_ms"] for r in rows], 50),
                "tts_ttfb_p50_ms": rounded_percentile([r["tts_ttfb_ms"] for r in rows], 50),
                "first_phrase_plus_tts_ttfb_p50_ms": rounded_percentile(both, 50),
                "first_phrase_plus_tts_ttfb_p95_ms": rounded_percentile(both, 95),
                "later_phrases": len(gaps),
                "audible_gaps": sum(1 for g in gaps if g > 0),
                "gap_ms_max": rounded_percentile(gaps, 100),
            }
        )
    print(f"Piper real-time factor: {report['piper_rtf']}")
    head = ("first/min", "pause", "words", "phrase", "ttfb", "sum p50", "sum p95", "gaps")
    print("{:>9} {:>5} {:>5} {:>7} {:>6} {:>8} {:>8} {:>6}".format(*head))
    for row in report["settings"]:
        print(
            f"{row['first_min_words']:>4}/{row['min_words']:<4} "
            f"{'yes' if row['pause_decoding'] else 'no':>5} "
            f"{row['first_phrase_words_p50']!s:>5} "
            f"{row['first_phrase_p50_ms']!s:>7} {row['tts_ttfb_p50_ms']!s:>6} "
            f"{row['first_phrase_plus_tts_ttfb_p50_ms']!s:>8} "
            f"{row['first_phrase_plus_tts_ttfb_p95_ms']!s:>8} "
            f"{row['audible_gaps']}/{row['later_phrases']:<4}"
        )
    write_json(args.out, report)


if __name__ == "__main__":
    asyncio.run(main())
