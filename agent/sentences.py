"""Where a sentence ends in streamed text: the LLM's answer editor and the phrase chunker
must agree on it, so it lives below both."""

from __future__ import annotations

import re

SENTENCE_END = re.compile(r"[.!?]+[\"')\]]*(?=\s)")
# Abbreviations whose dot does not end a sentence.
NOT_AN_END = re.compile(r"\b(?:Dr|Mr|Mrs|Ms|St|vs|etc|e\.g|i\.e|approx)\.$", re.I)


def sentence_end(buffer: str) -> int | None:
    """Where the first sentence in ``buffer`` ends (an index), once the next text has begun."""
    for m in SENTENCE_END.finditer(buffer):
        if not NOT_AN_END.search(buffer[: m.end()]) and not _inside_number(buffer, m.start()):
            return m.end()
    return None


def _inside_number(buffer: str, i: int) -> bool:
    return 0 < i < len(buffer) - 1 and buffer[i - 1].isdigit() and buffer[i + 1].isdigit()
