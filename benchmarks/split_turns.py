"""What a sentence split at its pauses loses in recognition, and what hearing each part after
the one before it (``Context``) wins back.

Every clip of the corpus sets with pauses inside its speech (``pauses`` in `pauses/`,
``internal_pauses_ge_300ms`` elsewhere; pauses in the first 0.5 s are clicks before the first
word, skipped) is cut in the middle of each pause, as a turn detector that ended the turn
there would. Each part is decoded by the agent's ``WhisperDecoder`` cold (as its own turn),
and after the part before it (that part's audio first, its words forced: the recogniser's
``asr.context_gap_secs``), with the closing full stop of the forced words kept or left off,
and after all the parts before it with their words heard again (recognition's pass at the
end of speech).
The clip decoded whole and faster-whisper's offline ``transcribe()`` of it are the
yardsticks. Reported: word errors per way, over all the cut clips' reference words.

    .venv/bin/python -m benchmarks.split_turns [--sets pauses main] [--line phone] \
        [--out runs/bench_split_turns.json]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from agent.audio import load_audio
from agent.evaluation.text import word_errors
from agent.recognition.streaming_stt import CONTEXT_MAX_SECS
from agent.recognition.whisper_decoder import RATE, Context, WhisperDecoder
from agent.settings import Settings
from agent.transports.g711 import through_phone_line
from benchmarks.results import write_json
from tests.support.clips import CORPUS

CLICK_SECS = 0.5


class _KeepFullStop(Context):
    """A context whose forced words keep recognition's closing punctuation."""

    @property
    def prefix(self) -> str:
        return self.text.strip()


def cut_clips(sets: list[str], line: str):
    """(name, reference, float32 audio, cut points in samples) for each clip with pauses."""
    for name in sets:
        path = CORPUS / name / "manifest.jsonl"
        for row in map(json.loads, path.read_text().splitlines()):
            pauses = row.get("pauses") or [
                p for p in row.get("internal_pauses_ge_300ms", []) if p[0] > CLICK_SECS
            ]
            if not pauses:
                continue
            samples = load_audio(path.parent / row["file"], RATE)
            if line == "phone":
                samples = through_phone_line(samples)
            cuts = [int((start + end) / 2 * RATE) for start, end in pauses]
            yield row["file"], row["text"], samples.astype(np.float32) / 32768.0, cuts


def decode_parts(decoder: WhisperDecoder, parts: list[np.ndarray], context) -> list[str]:
    """Each part's text; with ``context`` (a Context class), after the part before it."""
    texts = [decoder.transcribe(parts[0]).text]
    for before, part in zip(parts, parts[1:], strict=False):
        given = context(texts[-1], before) if context is not None else None
        texts.append(decoder.transcribe(part, context=given).text)
    return texts


def decode_parts_heard_again(decoder: WhisperDecoder, parts: list[np.ndarray]) -> list[str]:
    """Each part's text after the parts before it, whose words are heard again with it and
    replace the ones they had, as recognition's pass at the end of speech does (while the
    parts before it are at most ``CONTEXT_MAX_SECS`` long; then only the last is)."""
    settled: list[str] = []
    heard, audio = [decoder.transcribe(parts[0]).text], [parts[0]]
    for part in parts[1:]:
        if sum(map(len, audio)) > CONTEXT_MAX_SECS * RATE:
            settled, heard, audio = settled + heard[:-1], heard[-1:], audio[-1:]
        done = decoder.transcribe(
            part, context=Context(" ".join(heard), np.concatenate(audio)), hear_context=True
        )
        if done.context_words is not None:
            heard = [" ".join(w.text for w in done.context_words)]
        heard.append(done.text)
        audio.append(part)
    return settled + heard


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", nargs="+", default=["pauses", "main"])
    parser.add_argument("--line", choices=["wide", "phone"], default="wide")
    parser.add_argument("--out", default="runs/bench_split_turns.json")
    args = parser.parse_args()
    settings = Settings()
    decoder = WhisperDecoder.from_settings(settings.asr, settings.models_dir)
    ways = (
        "cold",
        "after, full stop kept",
        "after, full stop left off",
        "after, heard again",
        "whole",
        "offline",
    )
    errors = dict.fromkeys(ways, 0)
    words, clips = 0, []
    for name, reference, audio, cuts in cut_clips(args.sets, args.line):
        bounds = [0, *cuts, len(audio)]
        parts = [audio[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]
        heard = {
            "cold": decode_parts(decoder, parts, None),
            "after, full stop kept": decode_parts(decoder, parts, _KeepFullStop),
            "after, full stop left off": decode_parts(decoder, parts, Context),
            "after, heard again": decode_parts_heard_again(decoder, parts),
            "whole": [decoder.transcribe(audio).text],
            "offline": [decoder.offline(audio)],
        }
        for way, texts in heard.items():
            errors[way] += word_errors(reference, " ".join(texts))[0]
        words += word_errors(reference, "")[1]
        clips.append({"clip": name, "reference": reference, **heard})
    print(f"{len(clips)} clips cut at their pauses ({args.line} line), {words} words")
    for way in ways:
        print(f"  {way:28s} {errors[way]:4d} errors  {100 * errors[way] / words:5.1f} %")
    write_json(Path(args.out), {"line": args.line, "sets": args.sets, "words": words,
                          "errors": errors, "clips": clips})  # fmt: skip


if __name__ == "__main__":
    main()
