"""``voice-agent talk`` with its sound card replaced: these build machines have none.

``FakeSoundDevice`` stands in for the sounddevice module: its microphone stream plays a real
speech file (then silence) through the same PortAudio-style callback, on its own thread, at
real-time pace; its speaker stream pulls audio through the output callback and keeps it.
Everything else is real: models, LLM engine, pipeline, turn timer, files.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import soundfile as sf

from agent.audio import load_audio
from agent.errors import UserError
from agent.live.call import Runtime
from agent.live.talk import talk
from agent.pipeline import AgentModels, llm_engine
from agent.timing.budget import load_budget
from agent.transports.sounddevice_io import resolve_device
from tests.support.clips import SAMPLES
from tests.support.transcripts import wer

pytestmark = pytest.mark.slow

RATE = 16000


class FakeStream:
    """A PortAudio stream on a thread: calls ``callback`` every block, at real-time pace."""

    def __init__(self, owner: FakeSoundDevice, kind: str, **kwargs: Any) -> None:
        assert kwargs["samplerate"] == RATE and kwargs["channels"] == 1
        assert kwargs["dtype"] == "int16"
        self.owner = owner
        self.kind = kind
        self.device = kwargs["device"]
        self.callback = kwargs["callback"]
        self.block = kwargs["blocksize"] or 320
        self.closed = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def close(self) -> None:
        self.closed = True

    def _run(self) -> None:
        period = self.block / RATE
        next_at = time.monotonic()
        while not self._stop.is_set():
            if self.kind == "input":
                self.callback(self.owner.next_mic_block(self.block), self.block, None, None)
            else:
                out = bytearray(self.block * 2)
                self.callback(out, self.block, None, None)
                self.owner.played.extend(out)
            next_at += period
            self._stop.wait(max(0.0, next_at - time.monotonic()))


class FakeSoundDevice:
    """Stands in for the ``sounddevice`` module: a fake microphone playing ``speech``, a
    fake speaker keeping what it plays (in ``played``)."""

    def __init__(self, speech: np.ndarray) -> None:
        self.default = SimpleNamespace(device=[0, 1])
        self.played = bytearray()
        self.streams: list[FakeStream] = []
        self._mic = speech.astype(np.int16).tobytes()
        self._mic_pos = 0

    def query_devices(self) -> list[dict[str, Any]]:
        return [
            {"name": "Fake microphone", "max_input_channels": 1, "max_output_channels": 0,
             "default_samplerate": float(RATE)},
            {"name": "Fake speaker", "max_input_channels": 0, "max_output_channels": 2,
             "default_samplerate": float(RATE)},
        ]  # fmt: skip

    def next_mic_block(self, frames: int) -> bytes:
        block = self._mic[self._mic_pos : self._mic_pos + frames * 2]
        self._mic_pos += frames * 2
        return block + bytes(frames * 2 - len(block))

    def RawInputStream(self, **kwargs: Any) -> FakeStream:  # noqa: N802 - sounddevice's name
        self.streams.append(FakeStream(self, "input", **kwargs))
        return self.streams[-1]

    def RawOutputStream(self, **kwargs: Any) -> FakeStream:  # noqa: N802 - sounddevice's name
        self.streams.append(FakeStream(self, "output", **kwargs))
        return self.streams[-1]


@pytest.fixture(scope="module")
def runtime(settings):
    # No greeting: the microphone speaks at once, and would barge in on it.
    settings = settings.model_copy(update={"llm": settings.llm.model_copy(update={"greeting": ""})})
    models = AgentModels.load(settings)
    budget = load_budget(settings.budget_file, settings.budget_profile)
    with llm_engine(settings) as engine:
        yield Runtime(settings=settings, models=models, engine=engine, budget=budget)


async def test_talk_hears_the_microphone_and_answers_on_the_speaker(runtime, tmp_path, manifest):
    speech = load_audio(SAMPLES / "ldc93s1.wav", RATE)
    sd = FakeSoundDevice(np.concatenate([np.zeros(RATE // 2, dtype=np.int16), speech]))
    said: list[str] = []
    stop = asyncio.Event()
    call_task = asyncio.create_task(
        talk(runtime, sd, input_device=0, output_device=1, calls_dir=tmp_path, stop=stop,
             say=said.append)
    )  # fmt: skip

    def answered() -> bool:
        played = np.frombuffer(bytes(sd.played), dtype=np.int16)
        timed = any("voice-to-voice" in line for line in said)
        return timed and int(np.count_nonzero(np.abs(played) > 500)) > RATE // 4

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not answered() and not call_task.done():
        await asyncio.sleep(0.2)
    stop.set()
    call = await asyncio.wait_for(call_task, 30)

    assert answered(), f"no answer on the speaker; console: {said}"
    heard = [line[len("you: ") :] for line in said if line.startswith("you: ")]
    assert heard and wer(manifest["ldc93s1.wav"]["text"], heard[0]) <= 0.35, said
    assert any(line.startswith("bot: ") for line in said)
    assert len(sd.streams) == 2 and all(s.closed for s in sd.streams)
    assert {s.device for s in sd.streams} == {0, 1}

    records = [json.loads(x) for x in (call.dir / "turns.jsonl").read_text().splitlines()]
    assert records[0]["voice_to_voice_ms"] > 0 and records[0]["bot_text"]
    assert json.loads((call.dir / "call.json").read_text())["end_reason"] == (
        "stopped at the console"
    )
    audio, rate = sf.read(call.dir / "call.wav", dtype="int16")
    assert rate == RATE and np.abs(audio[:, 0]).max() > 1000 and np.abs(audio[:, 1]).max() > 1000


def test_devices_are_found_by_index_or_name_and_refused_clearly():
    sd = FakeSoundDevice(np.zeros(1, dtype=np.int16))
    assert resolve_device(sd, None, "input") == 0 and resolve_device(sd, None, "output") == 1
    assert resolve_device(sd, "speaker", "output") == 1 and resolve_device(sd, "0", "input") == 0
    with pytest.raises(UserError, match="not an audio input device"):
        resolve_device(sd, "1", "input")
    with pytest.raises(UserError, match="no input devices match 'usb'"):
        resolve_device(sd, "usb", "input")


def test_talk_without_a_sound_device_says_so_in_one_line_and_exits_2():
    try:
        import sounddevice

        if any(d["max_input_channels"] > 0 for d in sounddevice.query_devices()):
            pytest.skip("this machine has a microphone")
    except (ImportError, OSError):
        pass  # no module or no PortAudio: the command must say so too
    done = subprocess.run(
        [sys.executable, "-m", "agent.cli", "talk"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: no sound device"), lines
