"""The tool runner: results as text the model can say, parallel runs, side effects once."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agent.errors import UserError
from agent.settings import ToolSpec, ToolsSettings
from agent.tools.runner import ToolCall, ToolRunner, check_implementations

OBJECT = {"type": "object", "properties": {"n": {"type": "integer"}}}
BOOKED: list[dict] = []


def book(n: int) -> dict:
    BOOKED.append({"n": n})
    return {"booked": True, "reference": f"R{n}"}


async def slow(n: int) -> str:
    await asyncio.sleep(0.3)
    return f"slow {n}"


def broken(n: int) -> str:
    raise RuntimeError("database is locked")


def spec(name: str, python: str, **extra) -> ToolSpec:
    return ToolSpec(name=name, description=name, parameters=OBJECT, python=python, **extra)


def runner(*specs: ToolSpec) -> ToolRunner:
    return ToolRunner(specs)


def test_a_side_effect_runs_once_per_call_whatever_turn_asks_again():
    BOOKED.clear()
    tools = runner(spec("book", f"{__name__}:book", side_effect=True))

    async def go() -> list:
        first = await tools.run([ToolCall("book", {"n": 2})], turn=1)
        again = await tools.run([ToolCall("book", {"n": 2})], turn=2)  # heard again
        other = await tools.run([ToolCall("book", {"n": 3})], turn=2)
        return [first, again, other]

    first, again, other = asyncio.run(go())
    assert first[0].content == again[0].content == json.dumps({"booked": True, "reference": "R2"})
    assert other[0].content.endswith('"R3"}')
    assert BOOKED == [{"n": 2}, {"n": 3}] and tools.executions == 2


def test_a_lookup_runs_again_in_a_later_turn_but_not_twice_in_one():
    BOOKED.clear()
    tools = runner(spec("look", f"{__name__}:book"))

    async def go() -> None:
        await tools.run([ToolCall("look", {"n": 1})], turn=1)
        await tools.run([ToolCall("look", {"n": 1})], turn=1)
        await tools.run([ToolCall("look", {"n": 1})], turn=2)

    asyncio.run(go())
    assert len(BOOKED) == 2


def test_calls_of_one_turn_run_in_parallel():
    tools = runner(spec("slow", f"{__name__}:slow"))
    calls = [ToolCall("slow", {"n": i}) for i in range(3)]
    started = time.monotonic()
    results = asyncio.run(tools.run(calls, turn=1))
    assert [r.content for r in results] == ["slow 0", "slow 1", "slow 2"]
    assert time.monotonic() - started < 0.85  # three 0.3 s runs, not one after the other


def test_errors_timeouts_and_unknown_tools_become_sentences_the_model_can_say():
    tools = runner(
        spec("broken", f"{__name__}:broken", error_message="I couldn't reach the {name} system."),
        spec("slow", f"{__name__}:slow", timeout_secs=0.05),
    )
    calls = [ToolCall("broken", {"n": 1}), ToolCall("slow", {"n": 1}), ToolCall("nope")]
    broken_result, late, unknown = asyncio.run(tools.run(calls, turn=1))
    assert broken_result.content == "I couldn't reach the broken system." and not broken_result.ok
    assert "could not be reached" in late.content and not late.ok
    assert unknown.content == "There is no tool nope; the tools are: broken, slow."
    assert not unknown.ok


def test_a_barge_in_stops_the_wait_not_the_booking_and_the_ask_again_books_nothing_more():
    BOOKED.clear()
    tools = runner(spec("book", f"{__name__}:book", side_effect=True))

    async def go() -> str:
        waiting = asyncio.ensure_future(tools.run([ToolCall("book", {"n": 5})], turn=1))
        await asyncio.sleep(0)
        waiting.cancel()  # the caller barged in
        with pytest.raises(asyncio.CancelledError):
            await waiting
        again = await tools.run([ToolCall("book", {"n": 5})], turn=2)
        return again[0].content

    assert asyncio.run(go()).endswith('"R5"}')
    assert BOOKED == [{"n": 5}]


class _Endpoint(BaseHTTPRequestHandler):
    seen: list[tuple[dict, str | None, str | None]] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.seen.append((body, self.headers["X-Key"], self.headers["Idempotency-Key"]))
        payload = json.dumps({"free": body["n"] < 5}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args) -> None:
        pass


def test_an_http_tool_posts_json_with_the_auth_header_from_the_environment(monkeypatch):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Endpoint)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("SHOP_KEY", "s3cret")
    url = f"http://127.0.0.1:{server.server_port}/check"
    http = ToolSpec(name="check", description="d", parameters=OBJECT, url=url,
                    auth_header="X-Key", auth_env="SHOP_KEY")  # fmt: skip
    try:
        (result,) = asyncio.run(runner(http).run([ToolCall("check", {"n": 2})], turn=1))
    finally:
        server.shutdown()
    assert result.content == '{"free": true}' and result.ok
    body, key, idempotency = _Endpoint.seen[-1]
    assert body == {"n": 2} and key == "s3cret" and len(idempotency or "") == 32


def test_a_tool_needs_one_implementation_and_an_object_schema():
    with pytest.raises(ValueError, match="exactly one of python or url"):
        ToolSpec(name="x", description="d", python="a:b", url="http://h")
    with pytest.raises(ValueError, match="schema of an object"):
        ToolSpec(name="x", description="d", python="a:b", parameters={"type": "string"})
    with pytest.raises(ValueError, match="same name"):
        ToolsSettings(functions=[spec("a", "m:f"), spec("a", "m:g")])


def test_a_tool_that_cannot_be_loaded_is_one_line_at_start(tmp_path):
    (tmp_path / "shop.py").write_text("def check(n):\n    return n\n")
    check_implementations([spec("check", f"{tmp_path}/shop.py:check")])  # a file of its own
    with pytest.raises(UserError, match=r"tool implementation .*nope.py:check: cannot load"):
        check_implementations([spec("check", f"{tmp_path}/nope.py:check")])
    with pytest.raises(UserError, match="no function 'missing'"):
        check_implementations([spec("check", f"{__name__}:missing")])
