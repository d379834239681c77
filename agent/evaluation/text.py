"""Text as graders compare it: Whisper's English normaliser (numbers, spelling, casing)."""

from __future__ import annotations

import functools

import jiwer
from whisper_normalizer.english import EnglishTextNormalizer


@functools.cache
def _normaliser() -> EnglishTextNormalizer:
    return EnglishTextNormalizer()


def normalise(text: str) -> str:
    """Lower case, numbers as digits, British/American spellings merged, no punctuation."""
    return " ".join(_normaliser()(text).split())


def words(text: str) -> list[str]:
    return normalise(text).split()


def word_errors(reference: str, hypothesis: str) -> tuple[int, int]:
    """(errors, reference words) of one hypothesis, both normalised."""
    ref, hyp = normalise(reference), normalise(hypothesis)
    if not ref:
        return len(hyp.split()), 0
    if not hyp:
        return len(ref.split()), len(ref.split())
    out = jiwer.process_words(ref, hyp)
    return out.substitutions + out.deletions + out.insertions, len(ref.split())


def wer(pairs: list[tuple[str, str]]) -> float | None:
    """Corpus WER over (reference, hypothesis) pairs: all errors over all reference words."""
    counts = [word_errors(r, h) for r, h in pairs]
    total = sum(n for _, n in counts)
    return None if total == 0 else sum(e for e, _ in counts) / total
