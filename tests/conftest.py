"""Shared fixtures: the real sample speech and the real default models."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jiwer
import pytest

from agent.settings import Settings

SAMPLES = Path(__file__).resolve().parents[1] / "agent" / "samples"


def normalise(text: str) -> str:
    return " ".join(re.sub(r"[^a-z0-9' ]", " ", text.lower()).split())


def wer(reference: str, hypothesis: str) -> float:
    return jiwer.wer(normalise(reference), normalise(hypothesis) or "<empty>")


@pytest.fixture(scope="session")
def manifest() -> dict[str, dict]:
    lines = (SAMPLES / "manifest.jsonl").read_text().splitlines()
    return {m["file"]: m for m in map(json.loads, lines)}


@pytest.fixture(scope="session")
def settings() -> Settings:
    return Settings()
