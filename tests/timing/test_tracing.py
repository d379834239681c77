"""OpenTelemetry export of turn records: span shape on real records, and real OTLP/HTTP posts.

One real replay runs with ``VOICE_AGENT_OTEL_ENDPOINT`` pointing at a loopback HTTP server
started here, which keeps every POST it receives.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agent.settings import PROJECT_ROOT, Settings
from agent.timing.record import TurnRecord
from agent.timing.timeline import PART_STAGES
from agent.timing.tracing import TurnTracer, traces_url, turn_tracer
from tests.support.live_turns import (
    default_budget,
    finish_turn,
    live_call,
    replay_records,
    turn_from,
)

# a turn without tools or knowledge: voice-to-voice, its parts and the gap
CHILDREN = ("voice_to_voice", *PART_STAGES, "stt_to_llm")


class Collector(ThreadingHTTPServer):
    """A loopback stand-in for an OTLP/HTTP collector: keeps (path, body) of every POST."""

    def __init__(self) -> None:
        self.posts: list[tuple[str, bytes]] = []
        super().__init__(("127.0.0.1", 0), _Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def spans(self) -> list[Any]:
        """Every span posted to /v1/traces, decoded from the OTLP protobuf."""
        out = []
        for path, body in self.posts:
            if path == "/v1/traces":
                request = ExportTraceServiceRequest.FromString(body)
                for resource in request.resource_spans:
                    for scope in resource.scope_spans:
                        out.extend(scope.spans)
        return out


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.server.posts.append((self.path, body))  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def collector() -> Iterator[Collector]:
    server = Collector()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def replayed(
    collector: Collector, tmp_path_factory: pytest.TempPathFactory
) -> tuple[list[TurnRecord], Path, int, int]:
    """A real replay exporting to the collector: records, run folder, wall-clock window (ns)."""
    out = tmp_path_factory.mktemp("replay") / "run"
    before = time.time_ns()
    # Real-time pace: the spans are placed on the wall clock.
    env = {"VOICE_AGENT_OTEL_ENDPOINT": collector.url}
    records = replay_records(out, env=env, pace="realtime")
    return records, out, before, time.time_ns()


def in_memory(records: list[TurnRecord], wall_t0_ns: int) -> list[ReadableSpan]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    TurnTracer(provider).export(records, wall_t0_ns, call_id="c1")
    return list(exporter.get_finished_spans())


def ms(start_ns: int, end_ns: int) -> float:
    return (end_ns - start_ns) / 1e6


def test_spans_of_real_turns(replayed) -> None:
    records = replayed[0]
    t0 = 1_700_000_000_000_000_000
    spans = in_memory(records, t0)
    turns = [s for s in spans if s.name == "turn"]
    assert len(turns) == len(records)
    for record, turn in zip(records, turns, strict=True):
        children = [s for s in spans if s.parent and s.parent.span_id == turn.context.span_id]
        assert turn.parent is None
        assert all(s.context.trace_id == turn.context.trace_id for s in children)
        # Every stage happened in these turns, plus the gap; nothing else hangs off the turn.
        assert sorted(s.name for s in children) == sorted(CHILDREN)
        for span in children:
            value = record.gaps["stt_to_llm"] if span.name == "stt_to_llm" else None
            value = record.stages[span.name] if value is None else value
            assert abs(ms(span.start_time, span.end_time) - abs(value)) < 0.1, span.name
            assert turn.start_time <= span.start_time <= span.end_time <= turn.end_time
        events = record.events
        endpointing = next(s for s in children if s.name == "endpointing")
        assert abs(ms(t0, endpointing.start_time) - events["speech_end"]) < 0.1
        assert abs(ms(t0, turn.start_time) - events["speech_start"]) < 0.1
        assert abs(ms(t0, turn.end_time) - events["bot_audio_end"]) < 0.1
        attrs = dict(turn.attributes or {})
        assert attrs["turn.number"] == record.turn
        assert attrs["turn.input"] == record.input
        assert attrs["turn.voice_to_voice_ms"] == record.voice_to_voice_ms
        assert attrs["turn.interrupted"] is False
        assert attrs["turn.user_text_chars"] == len(record.user_text) > 0
        assert record.llm is not None
        assert attrs["llm.completion_tokens"] == record.llm.completion_tokens
        assert attrs["call.id"] == "c1"
    # What was said never leaves the process: no transcript, and no free-text attribute.
    said = [text for r in records for text in (r.user_text, r.bot_text)]
    for span in spans:
        attributes = dict(span.attributes or {})
        assert not any(text in str(value) for text in said for value in attributes.values())
        texts = {k for k, v in attributes.items() if isinstance(v, str)}
        assert texts <= {"call.id", "turn.input", "budget.verdict"}


def test_speculative_request_gives_a_forward_gap_span(replayed) -> None:
    """A negative stt_to_llm (LLM asked before the final transcript) is still a span."""
    record = replayed[0][0]
    events = dict(record.events)
    ready = max(events["turn_end"], events["stt_final"])
    events["llm_request"] = round(ready - 50.0, 1)
    changed = turn_from(record.model_copy(update={"events": events})).record(default_budget())
    assert changed.gaps["stt_to_llm"] == -50.0
    gap = next(s for s in in_memory([changed], 0) if s.name == "stt_to_llm")
    assert abs(ms(0, gap.start_time) - (ready - 50.0)) < 0.1
    assert abs(ms(0, gap.end_time) - ready) < 0.1
    assert gap.attributes["stage.ms"] == -50.0


def test_replay_posts_its_turns_to_the_collector(replayed, collector) -> None:
    records, out, before, after = replayed
    assert any(path == "/v1/traces" for path, _ in collector.posts)
    spans = collector.spans()
    turns = [s for s in spans if s.name == "turn" and _attr(s, "call.id") == out.name]
    assert sorted(_attr(s, "turn.number") for s in turns) == [r.turn for r in records]
    for turn in turns:
        record = records[_attr(turn, "turn.number") - 1]
        # Real wall-clock times: inside the replay's run.
        assert before <= turn.start_time_unix_nano < turn.end_time_unix_nano <= after
        children = {s.name: s for s in spans if s.parent_span_id == turn.span_id}
        assert set(children) == set(CHILDREN)
        v2v = children["voice_to_voice"]
        took = ms(v2v.start_time_unix_nano, v2v.end_time_unix_nano)
        assert abs(took - record.voice_to_voice_ms) < 0.1


def test_live_call_exports_when_it_ends(replayed, collector, tmp_path) -> None:
    records = replayed[0]
    call = live_call(Settings(otel_endpoint=collector.url), default_budget(), tmp_path)
    for record in records:
        finish_turn(call, record)
    call.finish()
    assert call._tracer is not None and call._tracer.flush()
    turns = [s for s in collector.spans() if s.name == "turn" and _attr(s, "call.id") == call.id]
    assert len(turns) == len(records)
    assert {_attr(s, "turn.voice_to_voice_ms") for s in turns} == {
        r.voice_to_voice_ms for r in records
    }


@pytest.mark.slow  # imports the whole agent, twice, in child processes
def test_off_by_default_and_lazy() -> None:
    """Without the endpoint nothing is imported; without the extra a set endpoint says so."""
    assert Settings().otel_endpoint is None and turn_tracer(None) is None
    script = """
import sys
class Missing:
    def find_spec(self, name, path=None, target=None):
        if name.startswith(("opentelemetry.sdk", "opentelemetry.exporter")):
            raise ImportError(name)
sys.meta_path.insert(0, Missing())
import agent.cli, agent.replay, agent.live.call
from agent.errors import UserError
from agent.timing.tracing import turn_tracer
assert turn_tracer(None) is None
try:
    turn_tracer("http://127.0.0.1:9")
except UserError as exc:
    print(exc)
"""
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=PROJECT_ROOT, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "voice-agent[tracing]" in done.stdout
    probe = "import sys, agent.cli, agent.replay, agent.live.call; " + (
        "print(any(m.startswith('opentelemetry.exporter') for m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=PROJECT_ROOT, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert done.stdout.strip() == "False", done.stderr[-2000:]


@pytest.mark.parametrize(
    ("endpoint", "url"),
    [
        ("http://127.0.0.1:4318", "http://127.0.0.1:4318/v1/traces"),
        ("http://127.0.0.1:4318/", "http://127.0.0.1:4318/v1/traces"),
        ("https://otel.example/custom/v1/traces", "https://otel.example/custom/v1/traces"),
    ],
)
def test_traces_url(endpoint: str, url: str) -> None:
    assert traces_url(endpoint) == url


def _attr(span: Any, key: str) -> Any:
    for kv in span.attributes:
        if kv.key == key:
            value = kv.value
            return getattr(value, value.WhichOneof("value"))
    return None
