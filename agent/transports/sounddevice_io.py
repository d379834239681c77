"""Local microphone and speaker through sounddevice (PortAudio), 16 kHz mono 16-bit.

Both streams are opened before the call runs (a bad device is one error line, not a broken
call) and run PortAudio callbacks on PortAudio's thread. The input callback hands each
20 ms block to the event loop; the output callback plays what the pipeline queued and
silence otherwise, so a barge-in only has to empty that queue. ``sd`` is the sounddevice
module, or anything with the same ``RawInputStream``/``RawOutputStream``/``query_devices``
(the tests pass a fake, since the build machines have no sound card).
"""

from __future__ import annotations

import asyncio
import threading
from types import ModuleType
from typing import Any

from pipecat.frames.frames import CancelFrame, EndFrame

from agent.clock import CallClock
from agent.errors import UserError
from agent.timing.call_recorder import CallRecorder
from agent.transports.live import LiveInput, LiveOutput
from agent.transports.pacing import FRAME_MS

Device = int | str | None


def resolve_device(sd: ModuleType | Any, spec: str | None, kind: str) -> int:
    """A device index from a name fragment or an index (``None``: the default device).

    Raises UserError, in one line, when there is no such device or no device at all.
    """
    channels = f"max_{kind}_channels"
    devices = list(sd.query_devices())
    if not any(d[channels] > 0 for d in devices):
        raise UserError(
            f"no sound device: this machine has no audio {kind} device (PortAudio sees "
            f"{len(devices)} device(s)); `voice-agent talk` needs a microphone and a speaker"
        )
    if spec is None:
        index = sd.default.device[0 if kind == "input" else 1]
        if index is None or index < 0:
            index = next(i for i, d in enumerate(devices) if d[channels] > 0)
        return int(index)
    if spec.isdigit():
        index = int(spec)
        if index >= len(devices) or devices[index][channels] <= 0:
            raise UserError(f"device {index} is not an audio {kind} device: see --list-devices")
        return index
    matches = [i for i, d in enumerate(devices) if spec.lower() in d["name"].lower()
               and d[channels] > 0]  # fmt: skip
    if len(matches) != 1:
        found = "no" if not matches else f"{len(matches)}"
        raise UserError(f"{found} {kind} devices match {spec!r}: see --list-devices")
    return matches[0]


def describe_devices(sd: ModuleType | Any) -> list[str]:
    """One line per device: index, name, input/output channels, default rate."""
    return [
        f"{i:>3}  {d['name']}  (in {d['max_input_channels']}, out {d['max_output_channels']}, "
        f"{d['default_samplerate']:.0f} Hz)"
        for i, d in enumerate(sd.query_devices())
    ]


class _PortAudioStream:
    """What the microphone and the speaker share: one PortAudio stream, opened early.

    A mixin before ``LiveInput`` or ``LiveOutput``, whose constructor it calls on.
    """

    _stream: Any = None

    def __init__(
        self, sd: ModuleType | Any, device: Device, clock: CallClock, recorder: CallRecorder,
        *, rate: int,
    ) -> None:  # fmt: skip
        super().__init__(clock, recorder, rate=rate)  # type: ignore[call-arg]
        self._sd = sd
        self._device = device

    def _start(self, kind: str, rate: int, **stream_args: Any) -> None:
        """Open and start the stream; a bad device becomes one UserError line."""
        factory = self._sd.RawInputStream if kind == "input" else self._sd.RawOutputStream
        try:
            self._stream = factory(
                samplerate=rate, channels=1, dtype="int16", device=self._device, latency="low",
                **stream_args,
            )  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - PortAudio reports a bad device many ways
            raise UserError(
                f"cannot open the audio {kind} device {self._device} at {rate} Hz mono ({exc}): "
                "pick another with --input-device/--output-device (see --list-devices)"
            ) from None
        self._stream.start()

    def close(self) -> None:
        """Stop and close the stream (idempotent)."""
        if self._stream is not None:
            self._stream.stop()
            self._stream.close()
            self._stream = None


class SoundDeviceInput(_PortAudioStream, LiveInput):
    """The microphone: a PortAudio input stream, opened when the call starts."""

    def _callback(self, indata: Any, frames: int, time_info: Any, status: Any) -> None:
        self.feed_threadsafe(bytes(indata))

    def open(self) -> None:
        """Open and start the stream (before the call runs, so a bad device fails early)."""
        self.bind_loop(asyncio.get_running_loop())
        blocksize = self._rate * FRAME_MS // 1000
        self._start("input", self._rate, blocksize=blocksize, callback=self._callback)

    async def on_stopped(self) -> None:
        self.close()


class SoundDeviceOutput(_PortAudioStream, LiveOutput):
    """The speaker: a PortAudio output stream whose callback drains our queue."""

    def __init__(
        self, sd: ModuleType | Any, device: Device, clock: CallClock, recorder: CallRecorder,
        *, rate: int,
    ) -> None:  # fmt: skip
        super().__init__(sd, device, clock, recorder, rate=rate)
        self._queued = bytearray()
        self._lock = threading.Lock()

    def _callback(self, outdata: Any, frames: int, time_info: Any, status: Any) -> None:
        n = len(outdata)
        with self._lock:
            chunk = bytes(self._queued[:n])
            del self._queued[:n]
        outdata[: len(chunk)] = chunk
        outdata[len(chunk) :] = bytes(n - len(chunk))

    def open(self) -> None:
        """Open and start the stream (before the call runs, so a bad device fails early)."""
        self._start(
            "output", self._params.audio_out_sample_rate, blocksize=0, callback=self._callback
        )

    async def deliver(self, pcm: bytes) -> bool:
        with self._lock:
            self._queued += pcm
        return True

    async def flush_listener(self) -> None:
        with self._lock:
            self._queued.clear()

    async def stop(self, frame: EndFrame) -> None:
        await super().stop(frame)
        self.close()

    async def cancel(self, frame: CancelFrame) -> None:
        await super().cancel(frame)
        self.close()
