"""Faults inside a live call, against the real engines: each is recovered or ends the call cleanly.

The server runs in the test process (``serving_in_process``), so a test can see its calls,
connections and tasks; callers are simulated phones on loopback speaking real clips. The
LLM is the real llama.cpp server (engine ``llama-server``), killed with SIGKILL mid-answer;
a slow engine is that same server behind a delaying loopback proxy; the failing voice is
fault injection (``FaultInjectedVoice``) around the real Piper voice.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pydantic import SecretStr

from agent.audio import load_audio
from agent.live.call import Runtime
from agent.llm.engines.chat import OpenAIChatEngine
from agent.llm.engines.failover import FailoverEngine, failover_engine
from agent.llm.servers.llama import LlamaServer
from agent.pipeline import AgentModels, llm_engine
from agent.recognition.whisper_decoder import WhisperDecoder
from agent.settings import Settings
from agent.synthesis.piper_tts import PiperVoiceModel
from agent.timing.budget import load_budget
from tests.support.caller import PhoneCaller
from tests.support.clips import SAMPLES
from tests.support.live_server import InProcessServer, serving_in_process, wait_until

pytestmark = pytest.mark.slow

RATE = 16000
# Long answers, so there is an answer in progress to kill or hang up on.
LONG_ANSWERS = (
    "Tell the caller a long, detailed story about what they said, with at least fifteen sentences."
)


class FaultInjectedVoice:
    """FAULT INJECTION: the real Piper voice, made to raise on the next ``fail_next`` phrases."""

    def __init__(self, voice: PiperVoiceModel) -> None:
        self._voice = voice
        self.rate = voice.rate
        self.fail_next = 0
        self.failed = 0

    def synthesize(self, text: str, out_rate: int) -> np.ndarray:
        if self.fail_next > 0:
            self.fail_next -= 1
            self.failed += 1
            raise RuntimeError("injected synthesiser fault")
        return self._voice.synthesize(text, out_rate)


class FaultInjectedDecoder:
    """FAULT INJECTION: the real Whisper decoder, made to raise on every pass while ``failing``."""

    def __init__(self, decoder: WhisperDecoder) -> None:
        self._decoder = decoder
        self.failing = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._decoder, name)

    def transcribe(self, *args: Any, **kwargs: Any) -> Any:
        if self.failing:
            raise RuntimeError("injected recogniser fault")
        return self._decoder.transcribe(*args, **kwargs)


class DelayingProxy:
    """A loopback TCP proxy in front of a real server: each reply is held ``delay`` seconds.

    The delay is read per request, so a kept-alive HTTP connection is slowed down too.
    """

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.delay = 0.0
        self.port = 0
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in self._handlers:
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        task.add_done_callback(self._handlers.discard)
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        asked = asyncio.Event()  # a request went up and its reply has not started yet

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter, up: bool) -> None:
            try:
                while data := await src.read(65536):
                    if up:
                        asked.set()
                    elif asked.is_set():
                        asked.clear()
                        await asyncio.sleep(self.delay)
                    dst.write(data)
                    await dst.drain()
            except OSError:
                pass
            finally:
                dst.close()

        await asyncio.gather(pipe(reader, up_writer, True), pipe(up_reader, writer, False))


def question(name: str = "ldc93s1.wav") -> np.ndarray:
    return load_audio(SAMPLES / name, RATE)


def turn_records(folder: Path) -> list[dict]:
    return [json.loads(x) for x in (folder / "turns.jsonl").read_text().splitlines()]


def cpu_secs(pid: int) -> float:
    """CPU time a process has used so far (user + system), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def ask(phone: PhoneCaller, clip: np.ndarray, timeout: float = 60) -> float | None:
    """Speak a clip; the arrival time of the first bot audio after it, or None."""
    asked = phone.speak(clip)
    await asked.done.wait()
    reply = await phone.wait_for("media", asked.sent_at[-1] - 1.0, timeout)
    return reply.at if reply else None


@pytest.fixture(scope="module")
def models() -> AgentModels:
    return AgentModels.load(Settings())


@pytest.fixture(scope="module")
def server(models, tmp_path_factory) -> Iterator[InProcessServer]:
    """The embedded llama.cpp server engine (restarted by the failover policy), long answers."""
    llm = {"engine": "llama-server", "system_prompt": LONG_ANSWERS, "max_tokens": 300,
           "max_sentences": 50, "timeout_secs": 30, "keepalive_secs": 0, "speculate": False,
           "greeting": ""}  # fmt: skip
    settings = Settings(llm=llm)
    budget = load_budget(settings.budget_file)
    with llm_engine(settings) as engine:
        runtime = Runtime(settings=settings, models=models, engine=engine, budget=budget)
        with serving_in_process(runtime, tmp_path_factory.mktemp("calls")) as running:
            yield running


@pytest.fixture(scope="module")
def short(models, server, tmp_path_factory) -> Iterator[tuple[InProcessServer, DelayingProxy]]:
    """Short answers from the same llama.cpp server, through a delaying proxy, and a voice
    that can be made to fail."""
    proxy = DelayingProxy(engine_of(server).server.port)
    server.run(proxy.start())  # on the server's loop, which runs all along
    settings = Settings(llm={"engine": "openai", "base_url": f"http://127.0.0.1:{proxy.port}/v1",
                             "max_tokens": 16, "timeout_secs": 15.0, "keepalive_secs": 0,
                             "speculate": False, "greeting": ""})  # fmt: skip
    key = engine_of(server).server.api_key  # the proxy passes the request on as it is
    engine = OpenAIChatEngine(
        f"http://127.0.0.1:{proxy.port}/v1", "smollm2", settings.llm, api_key=key
    )
    voice = FaultInjectedVoice(models.voice)
    decoder = FaultInjectedDecoder(models.decoder)
    faulty = AgentModels(decoder=decoder, voice=voice, turn=models.turn)  # type: ignore[arg-type]
    runtime = Runtime(settings, faulty, engine, load_budget(settings.budget_file))
    with serving_in_process(runtime, tmp_path_factory.mktemp("short-calls")) as running:
        yield running, proxy
    server.run(proxy.close())


def answers_done(server: InProcessServer) -> int:
    """How many answers of the one call in progress have ended (their usage is recorded)."""
    (call,) = server.server.calls.values()
    return sum(1 for turn in call.timer.turns if turn.llm) if call.timer else 0


def engine_of(server: InProcessServer) -> FailoverEngine:
    engine = server.server.runtime.engine
    assert isinstance(engine, FailoverEngine) and engine.server is not None
    return engine


async def test_engine_killed_mid_answer_is_restarted_and_the_next_turn_is_answered(server):
    engine = engine_of(server)
    old_pid = engine.server.pid
    async with PhoneCaller(server.url("/phone")) as phone:
        await asyncio.sleep(0.5)
        first_audio = await ask(phone, question())
        assert first_audio is not None, "no answer before the kill"
        os.kill(old_pid, signal.SIGKILL)  # mid-answer: 300 tokens take seconds here
        assert await phone.wait_quiet(1.5, 60)
        assert await ask(phone, question("new_home_in_the_stars.wav")) is not None
        # An answer's usage is recorded when it ends: hang up once the second one has (a
        # loaded machine takes many seconds for a long answer, or to restart the server).
        assert await wait_until(lambda: answers_done(server) >= 2, 180), "no second answer"
        assert await phone.hang_up(30)
    # The first and the last turn: a loaded machine may hear a question as two turns.
    records = turn_records(server.calls("phone")[-1])
    first, second = records[0], records[-1]
    assert any("restarting the llama.cpp server" in e for e in first["errors"]), first["errors"]
    assert "lost my train of thought" in first["bot_text"], first["bot_text"]
    assert second["errors"] == [] and second["llm"]["completion_tokens"] > 0, second
    assert engine.restarts == 1 and engine.server.pid != old_pid and engine.server.healthy()


async def decoding(pid: int, secs: float = 0.4) -> bool:
    """Whether a process is busy (an engine decoding), judged by its CPU time over ``secs``."""
    before = cpu_secs(pid)
    await asyncio.sleep(secs)
    return cpu_secs(pid) - before > 0.1 * secs


def call_folder(server: InProcessServer, phone: PhoneCaller) -> Path:
    """The folder of the call a simulated phone made."""
    for folder in server.calls("phone"):
        info = folder / "call.json"
        if info.exists() and json.loads(info.read_text())["stream_sid"] == phone.stream_sid:
            return folder
    raise AssertionError(f"no call folder for stream {phone.stream_sid}")


async def test_caller_hanging_up_mid_answer_stops_decoding_and_frees_the_call(server):
    engine = engine_of(server)
    async with PhoneCaller(server.url("/phone")) as other:
        await asyncio.sleep(2.0)
        baseline_tasks = server.task_count()
        before = set(server.server.calls)
        phone = PhoneCaller(server.url("/phone"))
        await phone.__aenter__()
        # the call is set up on a thread: slower than half a second on a loaded machine
        assert await wait_until(lambda: len(set(server.server.calls) - before) == 1, 30)
        (call_id,) = set(server.server.calls) - before
        call = weakref.ref(server.server.calls[call_id])
        # Hang up while the engine is still decoding the answer (a short one may be over
        # by its first audio: ask again then).
        for _ in range(3):
            assert await ask(phone, question()) is not None
            if await decoding(engine.server.pid):
                break
            await phone.wait_quiet(1.0, 60)
        else:
            pytest.fail("three answers ended before their first audio")
        await phone.__aexit__(None, None, None)  # the socket closes while the bot talks
        assert await wait_until(lambda: len(server.server.calls) == 1, 15), "call not freed"
        # its pipeline's reference cycles too, at once: not at Python's next full collection
        assert await wait_until(lambda: call() is None, 5), "the call outlived its end"
        assert await wait_until(lambda: server.task_count() <= baseline_tasks, 15), (
            f"{server.task_count()} tasks on the server loop, {baseline_tasks} before the call"
        )
        # its socket is counted until the transport reports it lost, a loop turn or more
        # after the handler returned: later still on one busy core
        assert await wait_until(lambda: server.connections() == 1, 15), "socket not released"
        await asyncio.sleep(0.5)
        assert not await decoding(engine.server.pid, 1.5), "it kept decoding for nobody"
        # The other call was not disturbed: it is answered.
        assert await ask(other, question("new_home_in_the_stars.wav")) is not None
        assert await other.hang_up(30)
    assert await wait_until(lambda: server.connections() == 0 and not server.server.calls, 15)
    ended = json.loads((call_folder(server, phone) / "call.json").read_text())
    assert ended["end_reason"] == "the client closed the connection"


async def fault_then_recovery(
    served: InProcessServer,
    fault: Callable[[bool], None],
    recorded: Callable[[list[dict]], bool],
    limit_secs: float,
) -> tuple[list[dict], int]:
    """One call: a question asked with ``fault(True)``, then, once ``recorded`` holds of the
    call's turn records, one asked with ``fault(False)``. The call's turn records, and how
    many media messages came before the second question."""
    async with PhoneCaller(served.url("/phone")) as phone:
        await asyncio.sleep(0.5)
        fault(True)
        asked = phone.speak(question())
        await asked.done.wait()
        folder = served.calls("phone")[-1]

        def written() -> bool:
            return (folder / "turns.jsonl").exists() and recorded(turn_records(folder))

        assert await wait_until(written, limit_secs), "the faulty turn was never recorded"
        fault(False)
        media = len(phone.events("media"))
        assert await ask(phone, question("new_home_in_the_stars.wav")) is not None
        assert await phone.wait_quiet(1.0, 60)
        assert await phone.hang_up(30)
    return turn_records(folder), media


async def test_synthesiser_fault_skips_speech_and_the_call_goes_on(short):
    served, _ = short
    voice = served.server.runtime.models.voice
    assert isinstance(voice, FaultInjectedVoice)

    def fail_every_phrase(on: bool) -> None:
        voice.fail_next = 1000 if on else 0  # every phrase of the first answer

    records, media = await fault_then_recovery(served, fail_every_phrase, bool, 60)
    assert voice.failed > 0 and not media, "audio from a failing voice"
    failed, spoken = records[:2]
    assert any(e.startswith("tts: RuntimeError: injected") for e in failed["errors"]), failed
    assert failed["events"]["first_audio_out"] is None
    assert spoken["events"]["first_audio_out"] is not None and not spoken["errors"], spoken


async def test_recogniser_fault_is_recorded_and_the_next_turn_is_heard(short):
    served, _ = short
    decoder = served.server.runtime.models.decoder
    assert isinstance(decoder, FaultInjectedDecoder)

    def fail(on: bool) -> None:
        decoder.failing = on

    def failure_recorded(records: list[dict]) -> bool:
        return any(r["errors"] for r in records)

    records, _ = await fault_then_recovery(served, fail, failure_recorded, 30)
    assert any(e.startswith("stt: RuntimeError") for e in records[0]["errors"]), records[0]
    heard = records[-1]
    assert heard["user_text"] and not heard["errors"] and heard["bot_text"], heard


async def test_slow_engine_gets_the_fallback_sentence_then_recovers(short):
    """The real llama.cpp server behind a proxy that holds its replies past the timeout."""
    served, proxy = short
    async with PhoneCaller(served.url("/phone")) as phone:
        await asyncio.sleep(0.5)
        proxy.delay = 18.0  # past the 15 s timeout
        assert await ask(phone, question()) is not None, "no fallback sentence"
        proxy.delay = 0.0
        assert await phone.wait_quiet(1.0, 60)
        await asyncio.sleep(4.0)  # the held reply is let go: the next request has the engine
        assert await ask(phone, question("new_home_in_the_stars.wav")) is not None
        # Not on a pause in its audio: a loaded machine may decode slower than it is spoken.
        assert await wait_until(lambda: answers_done(served) >= 2, 120), "no second answer"
        assert await phone.hang_up(30)
    records = turn_records(served.calls("phone")[-1])  # (the first and the last turn)
    first, second = records[0], records[-1]
    assert "lost my train of thought" in first["bot_text"] and first["errors"], first
    assert "Timeout" in first["errors"][0], first["errors"]
    # No error: the engine answered (the tiny model may well echo the apology it sees in
    # its history, so the words alone do not tell).
    assert second["errors"] == [] and second["bot_text"], second
    assert second["llm"]["completion_tokens"] > 0, second["llm"]


async def test_a_dead_primary_fails_over_to_the_fallback_url(settings):
    """Two real llama.cpp servers: the primary is killed mid-answer, then is down."""
    s = settings.llm.model_copy(update={"max_tokens": 200, "system_prompt": LONG_ANSWERS})
    from agent import model_store

    gguf = model_store.resolve(s.model, "llm", settings.models_dir)
    key = "one-key-for-both-servers"  # the fallback URL is called with llm.api_key
    with LlamaServer(gguf, s, api_key=key) as primary, LlamaServer(gguf, s, api_key=key) as backup:
        s = s.model_copy(update={"base_url": primary.base_url, "fallback_url": backup.base_url,
                                 "api_key": SecretStr(key)})  # fmt: skip
        engine = failover_engine(OpenAIChatEngine(primary.base_url, gguf.stem, s), s)
        assert isinstance(engine, FailoverEngine) and engine.fallback is not None
        messages = [{"role": "user", "content": "Tell me about the stars."}]
        got: list[str] = []
        with pytest.raises(RuntimeError, match="failing over to the fallback URL"):
            async for item in engine.stream(messages, max_tokens=200):
                if isinstance(item, str):
                    got.append(item)
                    if len(got) == 3:
                        os.kill(primary.pid, signal.SIGKILL)
        assert len(got) >= 3
        # The next answer comes whole from the fallback, without an error.
        answer = [x async for x in engine.stream(messages, max_tokens=20)]
        assert [x for x in answer if isinstance(x, str)]
        # Later, the primary is tried again: still dead before the first token, so the
        # fallback answers that same turn.
        engine._primary_down_until = 0.0
        answer = [x async for x in engine.stream(messages, max_tokens=20)]
        assert [x for x in answer if isinstance(x, str)]
        engine.close()
