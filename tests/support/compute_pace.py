"""pipecat's ``run_test`` at compute pace: a ``SleepFrame`` between the frames sent moves the
call clock (``ComputeClock``) instead of sleeping on the wall clock.

The clock moves only once every frame sent so far has gone through and all the work it
started is done (``ComputeClock.wait_until``), and the processor's own waits on the clock
(playback pace, keepalives) wake as it passes their time. So a step happens in the same
order, at the same call time, on any machine, and a test takes as long as its work.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from pipecat.frames.frames import EndFrame, Frame
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineWorker
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.tests.utils import QueuedFrameProcessor, SleepFrame
from pipecat.workers.runner import WorkerRunner

from agent.clock import ComputeClock

START_TIMEOUT_SECS = 10.0  # the pipeline's start, on a loaded machine


async def run_paced(
    processor: FrameProcessor,
    *,
    frames_to_send: Iterable[Frame],
    clock: ComputeClock | None = None,
    direction: FrameDirection = FrameDirection.DOWNSTREAM,
) -> tuple[list[Frame], list[Frame]]:
    """The frames that came out downstream and upstream, as ``run_test`` returns them.

    ``clock`` is the one the processor keeps time on (a fresh one for a processor that keeps
    none). ``frames_to_send`` is read lazily: a generator may look at what came out so far
    before it sends the next frame. After the last frame the pipeline settles, then ends.
    """
    clock = clock or ComputeClock()
    up: asyncio.Queue[Frame] = asyncio.Queue()
    down: asyncio.Queue[Frame] = asyncio.Queue()
    source = QueuedFrameProcessor(queue=up, queue_direction=FrameDirection.UPSTREAM)
    sink = QueuedFrameProcessor(queue=down, queue_direction=FrameDirection.DOWNSTREAM)
    worker = PipelineWorker(
        Pipeline([source, processor, sink]), cancel_on_idle_timeout=False, enable_rtvi=False
    )
    started = asyncio.Event()

    @worker.event_handler("on_pipeline_started")
    async def _on_started(worker: PipelineWorker, frame: Frame) -> None:
        started.set()

    async def push_frames() -> None:
        await asyncio.wait_for(started.wait(), timeout=START_TIMEOUT_SECS)
        clock.start()
        for frame in frames_to_send:
            if isinstance(frame, SleepFrame):
                await clock.wait_until(clock.now_ms() + frame.sleep * 1000)
            else:
                await worker.queue_frame(frame, direction)
        await clock.settle()
        await worker.queue_frame(EndFrame())

    runner = WorkerRunner()
    await runner.add_workers(worker)
    await asyncio.gather(runner.run(), push_frames())
    received_down = [down.get_nowait() for _ in range(down.qsize())]
    received_up = [up.get_nowait() for _ in range(up.qsize())]
    return [f for f in received_down if not isinstance(f, EndFrame)], received_up
