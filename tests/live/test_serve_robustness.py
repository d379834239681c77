"""Bad input a live call must survive: a client that never reads, long silence, a minute of
continuous speech, non-English speech and pure noise.

Real models, a real server on loopback (in the test process, so its calls, connections and
log can be looked at), simulated phones speaking real clips.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from loguru import logger

from agent.audio import load_audio
from agent.live.call import Runtime
from agent.pipeline import AgentModels, llm_engine
from agent.settings import Settings
from agent.timing.budget import load_budget
from tests.support.caller import SILENCE, PhoneCaller
from tests.support.clips import SAMPLES
from tests.support.live_server import (
    InProcessServer,
    Server,
    serving,
    serving_in_process,
    wait_until,
)
from tests.support.memory import tree_rss_kib

pytestmark = pytest.mark.slow

RATE = 16000
DATA = Path(__file__).resolve().parents[1] / "data"


def clip(name: str, folder: Path = SAMPLES) -> np.ndarray:
    return load_audio(folder / name, RATE)


def records_of(served: InProcessServer | Server, phone: PhoneCaller) -> tuple[list[dict], dict]:
    """The turn records and call.json of the call a simulated phone made."""
    for folder in served.calls("phone"):
        info_file = folder / "call.json"
        if info_file.exists():
            info = json.loads(info_file.read_text())
            if info["stream_sid"] == phone.stream_sid:
                lines = (folder / "turns.jsonl").read_text().splitlines()
                return [json.loads(x) for x in lines], info
    raise AssertionError(f"no call folder for stream {phone.stream_sid}")


async def answered(phone: PhoneCaller, samples: np.ndarray, timeout: float = 60) -> bool:
    """Speak a clip and wait for bot audio after it."""
    asked = phone.speak(samples)
    await asked.done.wait()
    return await phone.wait_for("media", asked.sent_at[-1] - 0.5, timeout) is not None


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[InProcessServer]:
    # Long answers: enough bot audio to fill a deaf client's buffers.
    prompt = "Tell the caller a long, detailed story about what they said, in many sentences."
    settings = Settings(llm={"max_tokens": 160, "max_sentences": 50, "keepalive_secs": 0,
                             "timeout_secs": 60, "system_prompt": prompt,
                             "greeting": ""})  # fmt: skip
    models = AgentModels.load(settings)
    warnings: list[str] = []
    sink = logger.add(lambda m: warnings.append(str(m)), level="WARNING")
    with llm_engine(settings) as engine:
        runtime = Runtime(settings, models, engine, load_budget(settings.budget_file))
        with serving_in_process(runtime, tmp_path_factory.mktemp("calls")) as running:
            running.lines = warnings  # the server's warning lines, for the tests
            yield running
    logger.remove(sink)


async def test_a_client_that_never_reads_is_dropped_not_the_server(served):
    question = clip("ldc93s1.wav")
    deaf = PhoneCaller(served.url("/phone"), reading=False)
    await deaf.__aenter__()
    try:
        await asyncio.sleep(0.5)
        pause = np.zeros(10 * RATE, dtype=np.int16)  # time for each answer to be sent
        for _ in range(3):  # the answers' audio backs up: the call is dropped
            deaf.speak(question)
            deaf.speak(pause)
        assert await wait_until(lambda: not served.server.calls, 60), "the call was not dropped"
    finally:
        await deaf.__aexit__(None, None, None)
    assert await wait_until(lambda: served.connections() == 0, 10)
    _, info = records_of(served, deaf)
    assert info["end_reason"].startswith("the client stopped reading"), info["end_reason"]
    assert any("stopped reading" in line for line in served.lines)
    async with PhoneCaller(served.url("/phone")) as phone:  # the server still answers
        await asyncio.sleep(0.5)
        assert await answered(phone, clip("ldc93s1.wav"))
        assert await phone.hang_up(30)


async def test_long_silence_makes_no_turn_and_memory_stays_flat(tmp_path):
    """Silence, faster than real time (just under the 1.5x the server takes caller audio at).

    30 minutes of it would take too long here, so this proves the growth is bounded
    instead: over the second half of the silence the server grows by no more than the
    allocator noise (call.wav goes to disk as the call goes). Then a real question is still
    answered. The server is a process of its own: in the test process, heap pages that
    earlier tests freed and whatever runs now touches again read as growth (7-15 MiB in the
    suite's order, against 0-12 KiB for this test alone).
    """
    payload = base64.b64encode(SILENCE).decode()
    with serving(tmp_path / "calls") as served:
        pid = served.process.pid
        async with PhoneCaller(served.url("/phone")) as phone:
            silence = {"event": "media", "streamSid": phone.stream_sid,
                       "media": {"track": "inbound", "payload": payload}}  # fmt: skip
            await asyncio.sleep(1.0)
            started = time.monotonic()
            halfway_rss = None
            frames = 0
            while (elapsed := time.monotonic() - started) < SILENCE_WALL_SECS:
                if halfway_rss is None and elapsed >= SILENCE_WALL_SECS / 2:
                    halfway_rss = tree_rss_kib(pid)
                for _ in range(SILENCE_BURST):
                    await phone.send(silence)
                frames += SILENCE_BURST
                await asyncio.sleep(SILENCE_BURST * 0.02 / SILENCE_SPEEDUP)
            assert halfway_rss is not None
            grew = tree_rss_kib(pid) - halfway_rss
            assert await answered(phone, clip("new_home_in_the_stars.wav"))
            await asyncio.sleep(1.0)
            assert await phone.hang_up(30)
        records, _ = records_of(served, phone)
        log = served.stdout + served.stderr
    assert len(records) == 1, [r["user_text"] for r in records]  # only the question
    assert records[0]["user_text"], records[0]
    assert not any("backlog" in line for line in log), "the pipeline fell behind"
    assert grew < 8 * 1024, f"{grew} KiB more over {frames * 0.02 / 2:.0f} s"


async def test_a_minute_of_continuous_speech(served):
    """Real clips back to back, pauses cut short: 60 s of speech without a real break."""
    parts = []
    for name in ("jfk_part1.wav", "jfk_part2.wav", "ldc93s1.wav", "new_home_in_the_stars.wav"):
        samples = clip(name)
        loud = np.flatnonzero(np.abs(samples) > 500)
        parts.append(samples[loud[0] : loud[-1]])
    speech = np.concatenate(parts)
    speech = np.tile(speech, int(np.ceil(60 * RATE / len(speech))))[: 60 * RATE]
    async with PhoneCaller(served.url("/phone")) as phone:
        await asyncio.sleep(0.5)
        assert await answered(phone, speech, timeout=60), "no answer after a minute of speech"
        await asyncio.sleep(1.0)
        assert await phone.hang_up(30)
    records, info = records_of(served, phone)
    assert records and all(not r["errors"] for r in records), records
    assert sum(len(r["user_text"].split()) for r in records) > 40  # it was heard, not dropped
    assert info["end_reason"] == "the phone sent stop"


@pytest.mark.parametrize("kind", ["non-English speech", "pure noise"])
async def test_harmless_turn_then_the_call_goes_on(served, kind):
    if kind == "pure noise":
        rng = np.random.default_rng(9)
        odd = (rng.normal(0, 3000, 5 * RATE)).clip(-32768, 32767).astype(np.int16)
    else:
        odd = clip("espeak_spanish.wav", DATA)
    async with PhoneCaller(served.url("/phone")) as phone:
        await asyncio.sleep(0.5)
        phone.speak(odd)
        await phone.wait_quiet(3.0, 60)  # whatever it made of it, let it finish
        assert await answered(phone, clip("ldc93s1.wav")), f"no answer after {kind}"
        await asyncio.sleep(1.0)
        assert await phone.hang_up(30)
    records, info = records_of(served, phone)
    assert records and all(not r["errors"] for r in records), records
    assert records[-1]["user_text"], records[-1]  # the English question was heard
    assert info["end_reason"] == "the phone sent stop"


SILENCE_SPEEDUP = 1.4
SILENCE_WALL_SECS = 20.0
SILENCE_BURST = 25
