"""The pause-work benchmark times each turn's pass and verdict alone and as a pair."""

from __future__ import annotations

import numpy as np
import pytest

from agent.recognition.whisper_decoder import RATE
from benchmarks.pause_work import measure
from tests.support.clips import load_clip, whole_sentences


@pytest.mark.slow
def test_each_turn_is_timed_alone_and_as_a_pair_that_lasts_until_both_are_done():
    turns = [(load_clip(c, RATE) / 32768).astype(np.float32) for c in whole_sentences()[:2]]
    times = measure(turns)
    assert set(times) == {"pass alone", "verdict alone", "pass beside", "verdict beside", "both"}
    assert all(len(values) == len(turns) for values in times.values())
    for both, pass_, verdict in zip(
        times["both"], times["pass beside"], times["verdict beside"], strict=True
    ):
        assert 0 < pass_ <= both and 0 < verdict <= both
