"""``voice-agent pool`` for real: HAProxy, two ``voice-agent serve`` workers and one llama.cpp
server on loopback. Calls spread over the workers and their metrics move; a worker sent
SIGTERM finishes its call and exits 0 while new calls go to the other; a worker killed with
SIGKILL loses its own call only; a killed LLM server is reaped and started again.

Only the telephone network is simulated (``tests.support.caller``). No verdict depends on CPU
speed: every wait is for an event, with a limit that only a hang reaches.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from agent.audio import load_audio
from agent.live.pool import Pool, Worker
from agent.net import free_port
from agent.settings import Settings
from tests.support.caller import PhoneCaller
from tests.support.clips import SAMPLES
from tests.support.live_server import wait_until
from tests.support.prometheus import samples

TOKEN = "pool-test-token-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
WAIT = 240  # seconds: far past any answer on a busy 2-core machine; only a hang gets there
SPEECH = load_audio(SAMPLES / "ldc93s1.wav", 16000)


@pytest.fixture(scope="module")
def pool(tmp_path_factory) -> Iterator[Pool]:
    if shutil.which("haproxy") is None:
        pytest.skip("haproxy is not installed: `bash scripts/setup.sh --pool` (Debian, as "
                    "root) or `apt-get install haproxy`")  # fmt: skip
    settings = Settings(serve={"token": TOKEN, "drain_secs": WAIT})
    # The workers do not greet: these callers speak at once, and a greeting that started
    # late (a busy machine) still played after their words, where it passed for the answer.
    with pytest.MonkeyPatch.context() as env:
        env.setenv("VOICE_AGENT_LLM__GREETING", "")
        with Pool(settings, workers=2, host="127.0.0.1", port=free_port(),
                  calls_dir=tmp_path_factory.mktemp("calls")) as running:  # fmt: skip
            yield running


@pytest.mark.parametrize(
    ("flags", "token", "says"),
    [
        ((), None, "needs a serve token"),
        (("--cpus", "0-999"), TOKEN, "this machine lets us use CPUs"),
        (("--workers", "0"), TOKEN, "at least 1"),
    ],
)
def test_bad_input_is_one_line(flags, token, says):
    env = {k: v for k, v in os.environ.items() if k != "VOICE_AGENT_SERVE__TOKEN"}
    if token:
        env["VOICE_AGENT_SERVE__TOKEN"] = token
    done = subprocess.run([sys.executable, "-m", "agent.cli", "pool", "--port", "0", *flags],
                          capture_output=True, text=True, env=env, timeout=120)  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: ") and says in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_a_worker_is_given_the_pools_config_file(tmp_path):
    """The config file goes to each worker on its command line (nothing exports it)."""
    config = tmp_path / "agent.yaml"
    command = Worker(0, 8000, tmp_path / "calls", {}, config=config).command()
    assert command[-2:] == ["--config", str(config)]
    assert "--config" not in Worker(0, 8000, tmp_path / "calls", {}).command()


def caller(pool: Pool) -> PhoneCaller:
    """A phone call to the pool's one address, with the token as Twilio would pass it."""
    return PhoneCaller(f"ws://127.0.0.1:{pool.port}/phone", parameters={"token": TOKEN})


def scrape(worker: Worker) -> dict[tuple[str, tuple], float]:
    response = httpx.get(worker.url("/metrics"), headers=AUTH, timeout=10)
    assert response.status_code == 200
    return samples(response.content)


def active(worker: Worker) -> float:
    return scrape(worker)[("voice_agent_calls_active", ())]


async def answered(phone: PhoneCaller) -> bool:
    """Say something; whether bot audio came back after it."""
    utterance = phone.speak(SPEECH)
    await asyncio.wait_for(utterance.done.wait(), WAIT)
    return await phone.wait_for("media", utterance.sent_at[-1], WAIT) is not None


def call_info(worker: Worker, stream_sid: str) -> tuple[dict, list[dict]] | None:
    """The call.json and turn records of the call with this stream id, if the worker had it."""
    for path in worker.calls_dir.glob("*-phone-*/call.json"):
        info = json.loads(path.read_text())
        if info.get("stream_sid") == stream_sid:
            turns = path.with_name("turns.jsonl").read_text().splitlines()
            return info, [json.loads(line) for line in turns]
    return None


async def test_calls_spread_over_both_workers_and_their_metrics_move(pool):
    before = [scrape(w) for w in pool.workers]
    async with caller(pool) as a, caller(pool) as b:
        assert await wait_until(lambda: [active(w) for w in pool.workers] == [1, 1], WAIT)
        assert all(await asyncio.gather(answered(a), answered(b)))
        assert await a.hang_up(WAIT) and await b.hang_up(WAIT)
    for worker, earlier in zip(pool.workers, before, strict=True):
        now = scrape(worker)
        moved = {key: now[key] - earlier[key] for key in (
            ("voice_agent_calls_total", (("kind", "phone"),)),
            ("voice_agent_stage_seconds_count", (("stage", "voice_to_voice"),)),
        )}  # fmt: skip
        assert list(moved.values()) == [1, 1], moved
        assert now[("voice_agent_turns_total", ())] > earlier[("voice_agent_turns_total", ())]
        assert now[("voice_agent_calls_active", ())] == 0
        assert now[("process_resident_memory_bytes", ())] > 0
    homes = [[call_info(w, p.stream_sid) is not None for w in pool.workers] for p in (a, b)]
    assert sorted(homes) == [[False, True], [True, False]], homes


async def test_a_worker_sent_sigterm_finishes_its_call_and_exits_0(pool):
    async with caller(pool) as a:
        assert await wait_until(lambda: sorted(active(w) for w in pool.workers) == [0, 1], WAIT)
        drained, other = sorted(pool.workers, key=active, reverse=True)
        drained.process.send_signal(signal.SIGTERM)
        assert await wait_until(lambda: drained.probe() == 503, WAIT)
        assert drained.probe("/healthz") == 200  # alive, not ready
        with pytest.raises(InvalidStatus) as refused:
            async with connect(drained.url("/phone", "ws"), additional_headers=AUTH):
                pass
        assert refused.value.response.status_code == 503
        assert refused.value.response.headers["Retry-After"].isdigit()
        # Two new calls: the second would go to the drained worker by connection count
        # (one each) if HAProxy did not leave it out.
        async with caller(pool) as c, caller(pool) as d:
            assert await wait_until(lambda: active(other) == 2, WAIT)
            assert active(drained) == 1
            assert await c.hang_up(WAIT) and await d.hang_up(WAIT)
        assert await answered(a)  # the drained worker's caller is still heard and answered
        assert await a.hang_up(WAIT)
    assert await asyncio.to_thread(drained.process.wait, WAIT) == 0
    info, turns = call_info(drained, a.stream_sid)
    assert info["end_reason"] == "the phone sent stop"
    assert any(t["voice_to_voice_ms"] is not None for t in turns)


async def test_a_killed_worker_loses_only_its_own_call(pool):
    for worker in pool.workers:  # the one drained above comes back, as the pool command does
        if worker.process.poll() is not None:
            worker.start()
        await asyncio.to_thread(worker.wait_healthy)
    await asyncio.to_thread(pool.haproxy.wait_up, [w.name for w in pool.workers], WAIT)
    async with caller(pool) as a, caller(pool) as b:
        assert await wait_until(lambda: [active(w) for w in pool.workers] == [1, 1], WAIT)
        victim, survivor = pool.workers
        victim.process.kill()
        assert await wait_until(lambda: a.closed.is_set() or b.closed.is_set(), WAIT)
        lost, kept = (a, b) if a.closed.is_set() else (b, a)
        assert await answered(kept) and not kept.closed.is_set()
        async with caller(pool) as c:  # a new call goes to the worker left
            assert await wait_until(lambda: active(survivor) == 2, WAIT)
            assert await c.hang_up(WAIT)
        assert await kept.hang_up(WAIT)
    assert victim.process.wait() == -signal.SIGKILL
    assert call_info(survivor, kept.stream_sid) is not None
    assert call_info(survivor, lost.stream_sid) is None


async def test_a_killed_llm_server_is_reaped_started_again_and_answers(pool):
    """A killed shared LLM server was never started again (every later turn an apology,
    /readyz 200, nothing logged) and stayed a zombie until the pool exited."""
    lines: list[str] = []
    pool.say = lines.append
    serving = [w for w in pool.workers if w.process.poll() is None]
    old = pool.llm.pid
    environ = Path(f"/proc/{old}/environ").read_bytes()  # what it inherited: not our secrets
    assert b"PATH=" in environ and b"VOICE_AGENT" not in environ
    os.kill(old, signal.SIGKILL)
    # Nobody has restarted it yet: the workers say they cannot take a call.
    assert await wait_until(lambda: all(w.probe() == 503 for w in serving), WAIT)
    stopping = threading.Event()
    supervisor = threading.Thread(target=pool.run, args=(stopping, 0.2))
    began = time.monotonic()
    supervisor.start()
    try:
        assert await wait_until(lambda: pool.llm.pid != old and pool.llm.alive(), WAIT)
        assert not Path(f"/proc/{old}").exists(), "the killed server was not reaped"
        assert await wait_until(lambda: all(w.probe() == 200 for w in serving), WAIT)
        names = [w.name for w in serving]
        await asyncio.to_thread(pool.haproxy.wait_up, names, WAIT)
        async with caller(pool) as phone:
            assert await answered(phone)
            print(f"answering again {time.monotonic() - began:.1f} s after the supervisor "
                  f"found the LLM server gone: {lines}")  # fmt: skip
            assert await phone.hang_up(WAIT)
    finally:
        stopping.set()
        supervisor.join(WAIT)
    assert any("the LLM server exited (status -9)" in line for line in lines), lines
    assert any("the LLM server answers again" in line for line in lines), lines
