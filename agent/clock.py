"""The call clock and the two-channel call recording that share one timeline."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import soundfile as sf


class CallClock:
    """Monotonic milliseconds since the call started."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.wall_t0_ns = time.time_ns()  # the same instant on the wall clock, for exports

    def now_ms(self) -> float:
        return round((time.monotonic() - self.t0) * 1000.0, 1)


class CallRecorder:
    """call.wav: channel 0 the user audio as pushed, channel 1 the bot audio as written.

    Each channel is placed by sample position on the call clock, so anyone can read
    voice-to-voice off the file.
    """

    def __init__(self, rate: int) -> None:
        self.rate = rate
        self._user = bytearray()
        self._bot = bytearray()

    def position(self, at_ms: float) -> int:
        return int(round(at_ms * self.rate / 1000.0))

    @staticmethod
    def _place(track: bytearray, pos: int, pcm: bytes) -> None:
        start = pos * 2
        if len(track) < start:
            track.extend(bytes(start - len(track)))
        track[start : start + len(pcm)] = pcm

    def write_user(self, pos: int, pcm: bytes) -> None:
        self._place(self._user, pos, pcm)

    def write_bot(self, pos: int, pcm: bytes) -> None:
        self._place(self._bot, pos, pcm)

    def cut_bot(self, pos: int) -> None:
        """Drop bot audio from ``pos`` on (a barge-in flushed the speaker)."""
        del self._bot[pos * 2 :]

    def save(self, path: Path) -> None:
        user = np.frombuffer(bytes(self._user), dtype=np.int16)
        bot = np.frombuffer(bytes(self._bot), dtype=np.int16)
        n = max(len(user), len(bot))
        stereo = np.zeros((n, 2), dtype=np.int16)
        stereo[: len(user), 0] = user
        stereo[: len(bot), 1] = bot
        sf.write(str(path), stereo, self.rate, subtype="PCM_16")
