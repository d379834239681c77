"""One worker's Prometheus metrics: its calls, its turns' stages and errors, its memory.

Each ``CallServer`` has its own registry (several servers may share a test process), served
as Prometheus text on ``/metrics``. Stage latencies use the timeline's own stage names
(``agent.timing.timeline``), in seconds as Prometheus expects; errors are counted by the
stage that reported them (the prefix of a turn record's ``errors`` line), and ``call`` for a
call that failed as a whole.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    generate_latest,
)

from agent.timing.record import TurnRecord
from agent.timing.timeline import STAGE_NAMES

CONTENT_TYPE = CONTENT_TYPE_LATEST
# Stage latencies, in seconds: from a barely-there stage to a turn far over any budget.
BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0)
# Why a call was refused before it began (a small fixed set: a label per client would not be).
REFUSALS = ("full", "per_address", "pending", "draining", "denied")
KINDS = ("phone", "browser")
# The stages that report errors (``StageErrorFrame``), and ``call`` for a failed call.
ERROR_STAGES = ("stt", "llm", "tts", "transport", "call")


def error_stage(line: str) -> str:
    """``stt: ...`` / ``llm (engine): ...`` -> ``stt`` / ``llm``."""
    head = line.split(":", 1)[0]
    return head.split(" ", 1)[0].strip() or "unknown"


class CallMetrics:
    """The counters, gauges and histograms of one worker, in its own registry."""

    def __init__(self, active: Callable[[], int], capacity: int, draining: Callable[[], bool]):
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)  # process_resident_memory_bytes and CPU time
        r = self.registry
        Gauge("voice_agent_calls_active", "Calls in progress", registry=r).set_function(active)
        Gauge("voice_agent_calls_capacity", "Calls this worker takes at once (serve.max_calls)",
              registry=r).set(capacity)  # fmt: skip
        Gauge("voice_agent_draining", "1 while the worker drains (SIGTERM): no new calls",
              registry=r).set_function(lambda: float(draining()))  # fmt: skip
        self.calls = Counter("voice_agent_calls", "Calls begun", ["kind"], registry=r)
        self.refused = Counter("voice_agent_calls_refused", "Calls refused before they began",
                               ["reason"], registry=r)  # fmt: skip
        self.turns = Counter("voice_agent_turns", "Caller turns finished", registry=r)
        self.stages = Histogram("voice_agent_stage_seconds", "Per-turn stage latency",
                                ["stage"], buckets=BUCKETS, registry=r)  # fmt: skip
        self.errors = Counter("voice_agent_errors", "Recovered or fatal errors, by stage",
                              ["stage"], registry=r)  # fmt: skip
        for counter, labels in (
            (self.calls, KINDS),
            (self.refused, REFUSALS),
            (self.stages, STAGE_NAMES),
            (self.errors, ERROR_STAGES),
        ):
            for label in labels:  # every series exists from the start, at 0
                counter.labels(label)

    def observe_turns(self, records: list[TurnRecord]) -> None:
        """Count finished turns (each once), their stage latencies and their errors."""
        for record in records:
            self.turns.inc()
            for stage, ms in record.stages.items():
                if ms is not None:
                    self.stages.labels(stage).observe(ms / 1000)
            for line in record.errors:
                self.errors.labels(error_stage(line)).inc()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
