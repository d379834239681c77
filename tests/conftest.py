"""Shared fixtures: the real sample speech and the real default models."""

from __future__ import annotations

import re

import jiwer
import pytest

from agent.settings import Settings
from benchmarks import clips
from benchmarks.clips import SAMPLES

__all__ = ["SAMPLES", "normalise", "wer"]


def normalise(text: str) -> str:
    return " ".join(re.sub(r"[^a-z0-9' ]", " ", text.lower()).split())


def wer(reference: str, hypothesis: str) -> float:
    return jiwer.wer(normalise(reference), normalise(hypothesis) or "<empty>")


@pytest.fixture(scope="session")
def manifest() -> dict[str, dict]:
    return clips.manifest()


@pytest.fixture(scope="session")
def settings() -> Settings:
    return Settings()
