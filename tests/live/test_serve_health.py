"""What a balancer and an operator get from one ``voice-agent serve`` over HTTP: the probes
(no token, one word), the metrics (Prometheus text, behind the token), admission's 503 with
``Retry-After``, and the drain's wait. No models: fake connections, real requests."""

from __future__ import annotations

import asyncio
from http import HTTPStatus

from agent.live.drain import Drain
from agent.live.metrics import CallMetrics
from agent.live.server import CallServer
from agent.timing.record import TurnRecord
from tests.support.handshake import PORT, TOKEN, FakeConnection, request
from tests.support.prometheus import samples


def server(**options) -> CallServer:
    calls = CallServer(None, None, token=TOKEN, **options)  # type: ignore[arg-type]
    calls.bound("127.0.0.1", PORT)
    return calls


async def test_probes_need_no_token_and_say_one_word():
    calls = server(max_calls=1)
    stranger = {"Host": "balancer.internal:9000"}  # no token, a Host the server does not know
    for path, word in (("/healthz", b"ok\n"), ("/readyz", b"ready\n")):
        response = calls.process_request(FakeConnection("10.0.0.9"), request(path, **stranger))
        assert (response.status_code, response.body) == (200, word)
        assert response.headers["Cache-Control"] == "no-store"
    assert calls.process_request(FakeConnection("10.0.0.9"), request("/")).status_code == 401
    phone = request("/phone", Authorization=f"Bearer {TOKEN}")
    assert calls.process_request(FakeConnection("192.0.2.1"), phone) is None  # now full
    full = calls.process_request(FakeConnection("10.0.0.9"), request("/readyz"))
    assert (full.status_code, full.body) == (503, b"full\n")
    busy = calls.process_request(FakeConnection("192.0.2.2"), phone)
    assert busy.status_code == 503 and busy.headers["Retry-After"].isdigit()
    calls.drain.begin()
    draining = calls.process_request(FakeConnection("10.0.0.9"), request("/readyz"))
    assert (draining.status_code, draining.body) == (503, b"draining\n")
    alive = calls.process_request(FakeConnection("10.0.0.9"), request("/healthz"))
    assert alive.status_code == 200


async def test_metrics_are_behind_the_token_and_count_refusals():
    calls = server(max_calls=1)
    assert calls.process_request(FakeConnection("127.0.0.1"), request("/metrics")).status_code \
        == HTTPStatus.UNAUTHORIZED  # fmt: skip
    phone = request("/phone", Authorization=f"Bearer {TOKEN}")
    calls.process_request(FakeConnection("192.0.2.1"), phone)
    calls.process_request(FakeConnection("192.0.2.2"), phone)  # full
    calls.process_request(FakeConnection("192.0.2.3"), request("/phone/wrong-token"))
    calls.drain.begin()
    calls.process_request(FakeConnection("192.0.2.4"), phone)
    scrape = request("/metrics", Authorization=f"Bearer {TOKEN}")
    response = calls.process_request(FakeConnection("127.0.0.1"), scrape)
    assert response.status_code == 200
    assert response.headers["Content-Type"].startswith("text/plain; version=")
    found = samples(response.body)
    refused = {reason: found[("voice_agent_calls_refused_total", (("reason", reason),))]
               for reason in ("full", "denied", "draining", "per_address")}  # fmt: skip
    assert refused == {"full": 1, "denied": 1, "draining": 1, "per_address": 0}
    assert found[("voice_agent_calls_active", ())] == 0  # handshakes are not calls yet
    assert found[("voice_agent_calls_capacity", ())] == 1
    assert found[("voice_agent_draining", ())] == 1
    assert found[("process_resident_memory_bytes", ())] > 0


def test_turns_are_counted_with_their_stages_and_errors():
    metrics = CallMetrics(lambda: 0, 1, lambda: False)
    answered = TurnRecord(
        turn=1, events={}, voice_to_voice_ms=700.0,
        stages={"endpointing": 250.0, "voice_to_voice": 700.0, "llm_ttft": None},
        errors=["llm (openai): APITimeoutError: ...", "tts: RuntimeError: x"],
    )  # fmt: skip
    unanswered = TurnRecord(
        turn=2, events={}, voice_to_voice_ms=None,
        stages={"endpointing": 300.0, "voice_to_voice": None},
    )  # fmt: skip
    metrics.observe_turns([answered, unanswered])
    found = samples(metrics.exposition())
    assert found[("voice_agent_turns_total", ())] == 2
    count = "voice_agent_stage_seconds_count"
    assert found[(count, (("stage", "endpointing"),))] == 2
    assert found[(count, (("stage", "voice_to_voice"),))] == 1
    assert found[(count, (("stage", "llm_ttft"),))] == 0
    assert found[("voice_agent_stage_seconds_sum", (("stage", "voice_to_voice"),))] == 0.7
    assert found[("voice_agent_errors_total", (("stage", "llm"),))] == 1
    assert found[("voice_agent_errors_total", (("stage", "tts"),))] == 1


async def test_a_drain_waits_for_the_calls_then_for_nothing_past_its_limit():
    lines: list[str] = []
    busy = [2]
    drain = Drain(limit_secs=60)
    waiting = asyncio.ensure_future(drain.wait(asyncio.Event(), lambda: busy[0], lines.append))
    await asyncio.sleep(0.3)
    assert not waiting.done() and not lines  # no drain asked for: serving
    drain.begin()
    await asyncio.sleep(0.3)
    assert not waiting.done() and "2 call(s)" in lines[0]
    busy[0] = 0
    await asyncio.wait_for(waiting, 5)
    late = Drain(limit_secs=0.3)
    late.begin()
    await asyncio.wait_for(late.wait(asyncio.Event(), lambda: 1, lines.append), 5)
    assert "hanging up 1 call(s)" in lines[-1]
