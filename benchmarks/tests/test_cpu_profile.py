"""The CPU profile of a real call: every kind of work is counted, and the kinds sum to the
process's own CPU time, nothing counted twice, the rest reported as ``other``. How large
``other`` is depends on the machine's load (OpenMP teams spinning, models' warm-up), so its
share is a benchmark figure (docs/lab/benchmarks-log.md), not this test's verdict. The call
runs in a process of its own: in pytest's, threads earlier tests left are its CPU too."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agent.timing import cpu
from agent.timing.record import TurnRecord
from tests.support.clips import SAMPLES


@pytest.mark.slow
def test_a_replayed_call_is_accounted_by_kind_within_what_other_covers(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "benchmarks.cpu_profile", str(SAMPLES / "ldc93s1.wav"),
               "--pace", "compute", "--out", str(tmp_path)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads((tmp_path / "profile.json").read_text())
    secs = result["cpu_secs"]
    assert set(secs) == {*cpu.KINDS, "total"}
    for kind in ("stt_interim", "vad", "smart_turn", "llm_prefill", "llm_decode", "tts",
                 "event_loop"):  # fmt: skip
        assert secs[kind] > 0, kind
    counted = sum(v for k, v in secs.items() if k not in ("other", "total"))
    assert counted <= secs["total"] * 1.01  # nothing counted twice
    assert 0 <= secs["other"] < secs["total"]
    records = [
        TurnRecord.model_validate_json(line)
        for line in (tmp_path / "turns.jsonl").read_text().splitlines()
    ]
    path = records[0].critical_path
    assert path and "endpointing" in [step.stage for step in path]
    assert any(r.kind == "smart_turn" for step in path for r in step.ran)
