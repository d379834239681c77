"""The compute pace's clock: time moves only when the input asks, once all work is done."""

from __future__ import annotations

import asyncio
import time

from agent.clock import CallClock, ComputeClock, clock_for


async def test_the_clock_waits_for_executor_work_before_it_moves():
    clock = ComputeClock()
    clock.start()
    loop = asyncio.get_running_loop()
    done_at: list[float] = []

    def slow() -> None:
        time.sleep(0.2)

    async def work() -> None:
        await loop.run_in_executor(None, slow)
        done_at.append(clock.now_ms())

    task = asyncio.ensure_future(work())
    await asyncio.sleep(0)  # the job is submitted
    await clock.wait_until(20.0)
    assert done_at == [0.0]  # it finished before the clock moved: on the audio clock, at once
    assert clock.now_ms() == 20.0
    await task


async def test_busy_blocks_hold_the_clock_and_sleepers_wake_in_time_order():
    clock = ComputeClock()
    clock.start()
    woke: list[tuple[str, float]] = []

    async def sleeper(name: str, secs: float) -> None:
        await clock.sleep(secs)
        woke.append((name, clock.now_ms()))

    async def held() -> None:
        with clock.busy():
            await asyncio.sleep(0.05)  # e.g. an LLM stream on a socket
        woke.append(("held", clock.now_ms()))

    tasks = [asyncio.ensure_future(c) for c in (sleeper("b", 0.3), sleeper("a", 0.1), held())]
    await asyncio.sleep(0)
    await clock.wait_until(200.0)
    assert woke == [("held", 0.0), ("a", 100.0)]
    await clock.wait_until(1000.0)
    assert woke[-1] == ("b", 300.0)
    assert clock.now_ms() == 1000.0
    await asyncio.gather(*tasks)


async def test_a_cancelled_sleeper_does_not_stop_the_clock():
    clock = ComputeClock()
    clock.start()
    task = asyncio.ensure_future(clock.sleep(0.1))
    await asyncio.sleep(0)
    task.cancel()
    await clock.wait_until(500.0)
    assert clock.now_ms() == 500.0


def test_clock_for_names_the_two_paces():
    assert isinstance(clock_for("compute"), ComputeClock)
    assert type(clock_for("realtime")) is CallClock
    assert clock_for("compute").compute_paced and not CallClock().compute_paced
