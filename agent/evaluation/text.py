"""Text as graders compare it: Whisper's English normaliser (numbers, spelling, casing)."""

from __future__ import annotations

import functools
import re
from collections import Counter

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


def word_count(text: str) -> int:
    """Words of a transcript, each digit of a number one ("22415" is five, as "two two four
    one five" is): the same count however recognition wrote a dictated number. A lone
    letter is no word ("T-T-T-T" is a click heard as letters)."""
    tokens = re.findall(r"[\w']+", text)
    return sum(len(w) if w.isdigit() else 1 for w in tokens if w.isdigit() or len(w) > 1)


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


DUPLICATE_WORDS = 3  # a phrase this long heard more often than it was said is a duplicate


def duplicated_phrases(reference: str, hypothesis: str) -> list[str]:
    """Phrases of ``DUPLICATE_WORDS`` words or more the hypothesis says more often than the
    reference does: stitching that hears a phrase twice ("in 1813, in 1813"), which a
    misheard word almost never produces."""
    ref, hyp = words(reference), words(hypothesis)
    n = DUPLICATE_WORDS
    said = Counter(tuple(ref[i : i + n]) for i in range(len(ref) - n + 1))
    heard: Counter[tuple[str, ...]] = Counter()
    spans: list[list[int]] = []  # [start, end) of the extra occurrences, overlapping merged
    for i in range(len(hyp) - n + 1):
        gram = tuple(hyp[i : i + n])
        heard[gram] += 1
        if heard[gram] <= max(said[gram], 1):
            continue
        if spans and i <= spans[-1][1]:
            spans[-1][1] = i + n
        else:
            spans.append([i, i + n])
    return [" ".join(hyp[a:b]) for a, b in spans]


def stray_words(reference: str, hypothesis: str, trailing: bool = True) -> list[str]:
    """Words heard before the reference's first word or after its last (a click, breath or
    hiss heard as speech, or a stutter glued to the first word); a word misheard inside the
    speech is a substitution or an insertion between the reference's words, not this.
    ``trailing`` False: the words after the last are the next clip's (a merge), not noise."""
    ref, hyp = normalise(reference), normalise(hypothesis)
    if not hyp:
        return []
    if not ref:
        return hyp.split()
    chunks = jiwer.process_words(ref, hyp).alignments[0]
    hyp_words = hyp.split()
    ends = [chunks[0], chunks[-1]] if trailing and len(chunks) > 1 else [chunks[0]]
    edges = [c for c in ends if c.type == "insert"]
    return [w for c in edges for w in hyp_words[c.hyp_start_idx : c.hyp_end_idx]]
