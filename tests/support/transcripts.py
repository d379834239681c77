"""What was heard, scored against what was said: word error rate on normalised words."""

from __future__ import annotations

import re

import jiwer


def normalise(text: str) -> str:
    return " ".join(re.sub(r"[^a-z0-9' ]", " ", text.lower()).split())


def wer(reference: str, hypothesis: str) -> float:
    return jiwer.wer(normalise(reference), normalise(hypothesis) or "<empty>")
