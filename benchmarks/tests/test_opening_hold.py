"""The opening-hold benchmark counts the tokens a first phrase waits for, and why."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.opening_hold import measure


def words(text: str) -> list[str]:
    """A stand-in tokenizer (named a fake: no model here): a token a word."""
    return [w if i == 0 else " " + w for i, w in enumerate(text.split(" "))]


def test_an_answer_that_could_repeat_an_earlier_one_waits_for_more_tokens(tmp_path: Path) -> None:
    turns = [
        {"conversation": "c", "user": "What's the capital of France?",
         "answer": "The capital of France is Paris."},
        {"conversation": "c", "user": "And of Spain?",
         "answer": "The capital of Spain is Madrid."},
    ]  # fmt: skip
    run = tmp_path / "run.json"
    run.write_text(json.dumps({"runs": [{"turns": turns}]}))
    result = measure([run], words)
    assert result["turns"] == 2
    assert result["tokens_chunker_alone"]["p95"] == 3  # two whole words: the third has begun
    assert result["turns_held_longer"] == 1
    assert result["why_held"] == {"could become an earlier answer's sentence": 1}
