"""Optional OpenTelemetry export: each finished turn record as a ``turn`` span with its stages.

Off unless ``otel_endpoint`` is set. The OpenTelemetry SDK and OTLP exporter (the ``tracing``
extra) are imported only then, so the agent runs without them.

Each turn is one trace: a ``turn`` span from the turn's first event (the caller's speech
start) to its last (the bot's last audio, or the interruption), and one child span per stage
of ``STAGES`` that happened plus the ``stt_to_llm`` gap. Event times are ms on the call clock;
they become wall-clock nanoseconds through the instant the call clock started
(``CallClock.wall_t0_ns``), so every span's duration is the record's stage value. Transcripts
never leave the process: only their length is exported.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from agent.errors import UserError
from agent.timing.record import LLMUsage, TurnRecord
from agent.timing.timeline import GAP, STAGES

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Tracer

TRACES_PATH = "/v1/traces"
EXPORT_TIMEOUT_SECS = 5.0


def traces_url(endpoint: str) -> str:
    """The collector's trace URL: a bare base URL gets OTLP/HTTP's ``/v1/traces`` appended.

    That is what OTEL_EXPORTER_OTLP_ENDPOINT means; a URL with a path is used as it is.
    """
    if urlsplit(endpoint).path.strip("/") == "":
        return endpoint.rstrip("/") + TRACES_PATH
    return endpoint


def _ns(wall_t0_ns: int, at_ms: float) -> int:
    return wall_t0_ns + round(at_ms * 1_000_000)


def stage_intervals(record: TurnRecord) -> dict[str, tuple[float, float]]:
    """(start, end) in call-clock ms of every stage that happened, and of the gap.

    A stage starts at its ``from`` event and lasts its recorded value (so a ``stt_final``
    that was ready early is a zero-length span at ``turn_end``). The gap ends at the LLM
    request; a negative one (speculative request) runs from the request to the transcript.
    """
    events = record.events
    spans = [(name, events[start], record.stages[name]) for name, (start, _) in STAGES.items()]
    gap, request = record.gaps[GAP], events["llm_request"]
    if gap is not None and request is not None:
        spans.append((GAP, request - gap, gap))
    return {
        name: (min(at, at + ms), max(at, at + ms))
        for name, at, ms in spans
        if at is not None and ms is not None
    }


def turn_attributes(record: TurnRecord, call_id: str | None) -> dict[str, Any]:
    """What a trace backend may know about a turn: numbers and sizes, never what was said."""
    llm = record.llm or LLMUsage()  # no usage reported: no token counts
    attributes = {
        "call.id": call_id,
        "turn.number": record.turn,
        "turn.input": record.input,
        "turn.user_text_chars": len(record.user_text),
        "turn.voice_to_voice_ms": record.voice_to_voice_ms,
        "turn.interrupted": record.interrupted,
        "turn.barge_in_ms": record.barge_in_ms,
        "turn.stt_lead_ms": record.stt_lead_ms,
        "turn.errors": len(record.errors),
        "llm.prompt_tokens": llm.prompt_tokens,
        "llm.cached_tokens": llm.cached_tokens,
        "llm.completion_tokens": llm.completion_tokens,
    }
    return {k: v for k, v in attributes.items() if v is not None}


def record_turn(
    tracer: Tracer, record: TurnRecord, wall_t0_ns: int, call_id: str | None = None
) -> None:
    """Emit one turn record as a ``turn`` span and its stage spans (nothing if it has no event)."""
    from opentelemetry import trace

    times = [t for t in record.events.values() if t is not None]
    if not times:
        return
    turn = tracer.start_span(
        "turn", start_time=_ns(wall_t0_ns, min(times)),
        attributes=turn_attributes(record, call_id),
    )  # fmt: skip
    inside = trace.set_span_in_context(turn)
    for name, (start, end) in stage_intervals(record).items():
        value = record.gaps[GAP] if name == GAP else record.stages[name]
        attributes: dict[str, Any] = {"stage.ms": value}
        if (verdict := record.budget.get(name)) is not None:
            attributes["budget.verdict"] = verdict
        span = tracer.start_span(
            name, context=inside, start_time=_ns(wall_t0_ns, start), attributes=attributes
        )
        span.end(end_time=_ns(wall_t0_ns, end))
    turn.end(end_time=_ns(wall_t0_ns, max(times)))


class TurnTracer:
    """Sends finished turn records through one tracer provider."""

    def __init__(self, provider: TracerProvider) -> None:
        self.provider = provider
        self._tracer = provider.get_tracer("voice-agent")

    def export(
        self, records: list[TurnRecord], wall_t0_ns: int, *, call_id: str | None = None
    ) -> None:
        for record in records:
            record_turn(self._tracer, record, wall_t0_ns, call_id)

    def flush(self, timeout_secs: float = EXPORT_TIMEOUT_SECS) -> bool:
        """Push queued spans now (a replay ends right after; live calls need not wait)."""
        return self.provider.force_flush(timeout_millis=int(timeout_secs * 1000))


@functools.cache
def _otlp_tracer(endpoint: str) -> TurnTracer:
    """One provider and batching exporter per endpoint for the whole process."""
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        raise UserError(
            "otel_endpoint is set but OpenTelemetry is not installed: "
            "pip install 'voice-agent[tracing]', or unset otel_endpoint"
        ) from None
    provider = TracerProvider(resource=Resource.create({"service.name": "voice-agent"}))
    exporter = OTLPSpanExporter(endpoint=traces_url(endpoint), timeout=EXPORT_TIMEOUT_SECS)
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return TurnTracer(provider)


def turn_tracer(endpoint: str | None) -> TurnTracer | None:
    """The process's exporter for ``endpoint``; None when tracing is off (nothing imported)."""
    if not endpoint:
        return None
    return _otlp_tracer(endpoint)
