"""The sample speech that benchmarks and tests play: where it lies, which clips, what each says.

One list here so that every benchmark asks the same turns in the same order, and a new sample
is added once.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import agent
from agent.audio import load_audio

SAMPLES = Path(agent.__file__).resolve().parent / "samples"
# The developer corpus (real speech, many speakers) lies beside the checkout; never copied in.
CORPUS = Path(__file__).resolve().parents[3] / "shared" / "corpus"
# Every sample, in the order a replayed call asks them: a question first.
CLIPS = ("new_home_in_the_stars.wav", "ldc93s1.wav", "jfk_part1.wav", "jfk_part2.wav")
# A fresh clone has no corpus: the tests that play it are skipped there.
needs_corpus = pytest.mark.skipif(not CORPUS.exists(), reason="needs ../shared/corpus")


@functools.cache
def manifest() -> dict[str, dict[str, Any]]:
    """Each sample's published facts (text, speech bounds, energy thresholds), by file name."""
    lines = (SAMPLES / "manifest.jsonl").read_text().splitlines()
    return {entry["file"]: entry for entry in map(json.loads, lines)}


def whole_sentences() -> tuple[str, ...]:
    """The clips that end a sentence, in ``CLIPS`` order: a live call's turns, since a clip
    that stops at a comma is rightly held open by turn-taking."""
    return tuple(c for c in CLIPS if manifest()[c]["text"].rstrip().endswith((".", "?", "!")))


def load_clip(name: str, rate: int) -> np.ndarray:
    """One sample as 16-bit mono at ``rate``."""
    return load_audio(SAMPLES / name, rate)
