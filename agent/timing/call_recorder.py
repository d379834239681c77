"""The two-channel call recording (call.wav), its samples placed on the call clock.

``agent.timing.callwav`` reads the same file back: voice-to-voice off the audio alone.
"""

from __future__ import annotations

import os
import shutil
import struct
import tempfile
from pathlib import Path
from typing import BinaryIO

import numpy as np
from loguru import logger

from agent.private_files import create_private

WAV_HEADER_BYTES = 44
CHANNELS = 2
FRAME_BYTES = 2 * CHANNELS  # one int16 sample per channel


def wav_header(rate: int, frames: int) -> bytes:
    """The canonical 44-byte header of a 16-bit stereo PCM WAV holding ``frames`` frames."""
    data = frames * FRAME_BYTES
    return struct.pack(
        "<4sI4s4sIHHIIHH4sI", b"RIFF", 36 + data, b"WAVE", b"fmt ", 16, 1, CHANNELS, rate,
        rate * FRAME_BYTES, FRAME_BYTES, 16, b"data", data,
    )  # fmt: skip


class CallRecorder:
    """call.wav: channel 0 the user audio as pushed, channel 1 the bot audio as written.

    Each channel is placed by sample position on the call clock, so anyone can read
    voice-to-voice off the file. Samples go straight to disk (to ``path``, else to an
    anonymous temporary file) at their place in the file, so a call of any length holds
    no audio in memory; ``save`` writes the header and puts the file where it belongs.
    """

    def __init__(self, rate: int, path: Path | None = None) -> None:
        self.rate = rate
        self._path = path
        self._file: BinaryIO | None = None
        self._ends = [0, 0]  # per channel: one past the last sample written (bot: after cuts)
        self._broken: str | None = None  # why recording stopped (a full disk), if it did
        if path is not None:
            self._open()

    def position(self, at_ms: float) -> int:
        return int(round(at_ms * self.rate / 1000.0))

    def _open(self) -> BinaryIO:
        if self._file is None:
            if self._path is None:
                self._file = tempfile.TemporaryFile(buffering=0)
            else:  # exclusive: never writes through a file or link someone else put there
                self._file = create_private(self._path)
            self._file.write(wav_header(self.rate, 0))
        return self._file

    def _place(self, channel: int, pos: int, samples: np.ndarray) -> None:
        """Write one channel's samples at ``pos``, keeping the other channel's there."""
        if self._broken is not None or not len(samples):
            return
        try:
            fd = self._open().fileno()
            offset = WAV_HEADER_BYTES + pos * FRAME_BYTES
            frames = np.zeros((len(samples), CHANNELS), dtype=np.int16)
            old = os.pread(fd, frames.nbytes, offset)
            frames.reshape(-1)[: len(old) // 2] = np.frombuffer(old, np.int16, len(old) // 2)
            frames[:, channel] = samples
            os.pwrite(fd, frames.tobytes(), offset)
        except OSError as exc:  # a full disk costs the recording, never the call
            self._broken = f"{type(exc).__name__}: {exc.strerror or exc}"
            logger.warning("call recording stopped: {}", self._broken)

    def _write(self, channel: int, pos: int, pcm: bytes) -> None:
        samples = np.frombuffer(pcm, dtype=np.int16)
        self._place(channel, pos, samples)
        self._ends[channel] = max(self._ends[channel], pos + len(samples))

    def write_user(self, pos: int, pcm: bytes) -> None:
        self._write(0, pos, pcm)

    def write_bot(self, pos: int, pcm: bytes) -> None:
        self._write(1, pos, pcm)

    def cut_bot(self, pos: int) -> None:
        """Drop bot audio from ``pos`` on (a barge-in flushed the speaker)."""
        end = self._ends[1]
        if pos < end:
            self._place(1, pos, np.zeros(end - pos, dtype=np.int16))
            self._ends[1] = pos

    def save(self, path: Path) -> None:
        """Finish the file and put it at ``path`` (nothing is written after this)."""
        file = self._open()
        frames = max(self._ends)
        try:
            if self._broken is not None:
                raise OSError(self._broken)
            os.ftruncate(file.fileno(), WAV_HEADER_BYTES + frames * FRAME_BYTES)
            os.pwrite(file.fileno(), wav_header(self.rate, frames), 0)
            if self._path is None:
                file.seek(0)
                path.unlink(missing_ok=True)
                with create_private(path) as out:
                    shutil.copyfileobj(file, out)
            elif self._path != path:
                os.replace(self._path, path)
        except OSError as exc:
            logger.warning("call.wav not written: {}", exc.strerror or exc)
            if self._path is not None:
                self._path.unlink(missing_ok=True)
        finally:
            file.close()
            self._broken = self._broken or "saved"


class NullRecorder(CallRecorder):
    """A recorder that keeps nothing: for calls that write no call.wav (``--no-wav``, or a
    disk under its free-space floor)."""

    def write_user(self, pos: int, pcm: bytes) -> None:
        pass

    def write_bot(self, pos: int, pcm: bytes) -> None:
        pass

    def cut_bot(self, pos: int) -> None:
        pass

    def save(self, path: Path) -> None:
        pass
