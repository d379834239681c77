"""The CPU profile of a real call: every kind of work is counted, and the kinds sum to the
process's own CPU time with little left over as ``other``."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.timing import cpu
from agent.timing.record import TurnRecord
from benchmarks.cpu_profile import profile
from tests.support.clips import SAMPLES

# What a profile may leave unaccounted: the threads of no pool (Pipecat's, the replay's),
# threads that ended, a pool between its jobs.
OTHER_AT_MOST = 0.15


@pytest.mark.slow
def test_a_replayed_call_is_accounted_by_kind_within_what_other_covers(tmp_path: Path) -> None:
    result = profile([SAMPLES / "ldc93s1.wav"], tmp_path, "compute")
    secs = result["cpu_secs"]
    assert set(secs) == {*cpu.KINDS, "total"}
    for kind in ("stt_interim", "vad", "smart_turn", "llm_prefill", "llm_decode", "tts",
                 "event_loop"):  # fmt: skip
        assert secs[kind] > 0, kind
    counted = sum(v for k, v in secs.items() if k not in ("other", "total"))
    assert counted <= secs["total"] * 1.01  # nothing counted twice
    assert secs["other"] <= OTHER_AT_MOST * secs["total"]
    records = [
        TurnRecord.model_validate_json(line)
        for line in (tmp_path / "turns.jsonl").read_text().splitlines()
    ]
    path = records[0].critical_path
    assert path and "endpointing" in [step.stage for step in path]
    assert any(r.kind == "smart_turn" for step in path for r in step.ran)
