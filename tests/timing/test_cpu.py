"""The CPU profile's accounting: work on named pools is its kind's, what no job covers is
``other``, and the kinds with ``other`` sum to the process's own CPU time."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from agent.timing import cpu
from agent.timing.critical_path import critical_path


def burn(secs: float) -> None:
    """A fake workload: CPU time, not sleep."""
    end = time.thread_time() + secs
    while time.thread_time() < end:
        pass


def test_work_on_named_threads_is_counted_by_kind_and_the_rest_is_other() -> None:
    with cpu.profiling() as ledger:
        with cpu.owning("whisper"):  # a runtime's own thread, started at load
            helper_busy, helper_go, helper_end = (threading.Event() for _ in range(3))

            def runtime_thread() -> None:  # lives on, as a runtime's pool does
                helper_go.wait()
                burn(0.15)
                helper_busy.set()
                helper_end.wait()

            helper = threading.Thread(target=runtime_thread)
            helper.start()
        ledger.restart()

        def interim() -> None:  # the worker waits on its runtime's thread, as CTranslate2's
            helper_go.set()
            helper_busy.wait()
            burn(0.05)

        with ThreadPoolExecutor(1) as whisper, ThreadPoolExecutor(1) as piper:
            whisper.submit(cpu.marked("stt_interim", "whisper", interim)).result()
            piper.submit(cpu.marked("tts", "piper", burn), 0.1).result()
        unmarked = threading.Thread(target=burn, args=(0.1,))  # no pool: other
        unmarked.start()
        unmarked.join()
        burn(0.05)  # the loop's thread outside its jobs: the event loop
        got = ledger.seconds()
        helper_end.set()
        helper.join()
    assert got["stt_interim"] == pytest.approx(0.2, abs=0.03)
    assert got["tts"] == pytest.approx(0.1, abs=0.03)
    assert got["event_loop"] == pytest.approx(0.05, abs=0.03)
    assert got["other"] == pytest.approx(0.1, abs=0.03)
    assert sum(v for k, v in got.items() if k != "total") == pytest.approx(got["total"])
    assert cpu.active() is None


def test_a_switched_job_keeps_what_it_spent_before_as_its_first_kind() -> None:
    with cpu.profiling() as ledger, cpu.job("llm_prefill", "llama") as work:
        burn(0.05)
        cpu.switch(work, "llm_decode")
        burn(0.1)
    got = ledger.seconds()
    assert got["llm_prefill"] == pytest.approx(0.05, abs=0.02)
    assert got["llm_decode"] == pytest.approx(0.1, abs=0.02)
    assert [j.kind for j in ledger.jobs] == ["llm_prefill", "llm_decode"]


def test_marks_cost_nothing_without_a_profile_and_unknown_kinds_are_refused() -> None:
    with cpu.job("vad", "vad") as work:
        assert work is None
    with cpu.profiling(), pytest.raises(ValueError, match="unknown kind"):
        with cpu.job("thinking", "llama"):
            pass


def test_the_critical_path_lists_what_ran_in_each_stage_and_what_waited() -> None:
    jobs = [
        cpu.Job("vad", "vad", 95.0, 96.0, cpu_ms=0.5),
        cpu.Job("smart_turn", "smart_turn", 100.0, 140.0, cpu_ms=40.0),
        cpu.Job("vad", "vad", 127.0, 128.0, cpu_ms=0.5),
        cpu.Job("llm_prefill", "llama", 150.0, 250.0, cpu_ms=180.0),
    ]
    steps = critical_path({"endpointing": (90.0, 200.0), "llm_ttft": (200.0, 260.0)}, jobs)
    assert [s.stage for s in steps] == ["endpointing", "llm_ttft"]
    first, second = steps
    ran = [(r.kind, r.start_ms, r.end_ms, r.cpu_ms) for r in first.ran]
    assert ran == [
        ("vad", 95.0, 128.0, 1.0),  # each kind once
        ("smart_turn", 100.0, 140.0, 40.0),
        ("llm_prefill", 150.0, 200.0, 90.0),
    ]
    assert first.waited_ms == pytest.approx(110 - 1 - 40 - 50)
    assert [(r.kind, r.cpu_ms) for r in second.ran] == [("llm_prefill", 90.0)]
    assert second.waited_ms == pytest.approx(10.0)


def test_a_record_with_a_critical_path_draws_it_and_one_without_draws_nothing() -> None:
    from agent.reports.svg import critical_path_svg
    from agent.timing.record import TurnRecord

    record = TurnRecord(turn=1, events={}, stages={}, voice_to_voice_ms=None)
    assert critical_path_svg(record) == ""
    jobs = [cpu.Job("smart_turn", "smart_turn", 100.0, 140.0, cpu_ms=40.0)]
    record.critical_path = critical_path({"endpointing": (90.0, 200.0)}, jobs)
    drawn = critical_path_svg(record)
    assert "smart_turn: 40 CPU ms" in drawn and "waited 70 ms" in drawn
    assert "critical_path" in record.model_dump(mode="json")
