"""Audio files in and out: any common format, rate and channel count -> 16-bit mono at our rate."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import soundfile as sf
import soxr

from agent.errors import UserError

MAX_INPUT_SECONDS = 15 * 60


def load_audio(path: Path, rate: int) -> np.ndarray:
    """Read a file as int16 mono at ``rate`` (channels averaged, soxr high-quality resampling)."""
    if not path.exists():
        raise UserError(f"input {path} does not exist: give the path of an audio file")
    if not path.is_file():
        raise UserError(f"input {path} is not a file: give the path of an audio file")
    try:
        info = sf.info(str(path))
        if info.frames > MAX_INPUT_SECONDS * info.samplerate:
            raise UserError(
                f"input {path} is {info.frames / info.samplerate / 60:.0f} minutes long; "
                f"turns longer than {MAX_INPUT_SECONDS // 60} minutes are refused"
            )
        data, file_rate = sf.read(str(path), dtype="float32", always_2d=True)
    except sf.LibsndfileError as exc:
        raise UserError(
            f"input {path} is not a readable audio file ({exc.error_string}): "
            "use WAV, FLAC, OGG or another format libsndfile reads"
        ) from None
    if data.shape[0] == 0:
        raise UserError(f"input {path} has no audio samples: give a non-empty recording")
    mono = data.mean(axis=1)
    if file_rate != rate:
        mono = soxr.resample(mono, file_rate, rate, quality="VHQ")
    return float_to_int16(mono)


def float_to_int16(x: np.ndarray) -> np.ndarray:
    return (np.clip(x, -1.0, 1.0) * 32767.0).round().astype(np.int16)


def level_dbfs(samples: np.ndarray) -> float:
    """Energy of int16 samples in dBFS (as the sample clips measure it)."""
    x = samples.astype(np.float64) / 32768.0
    return float(10 * np.log10(np.mean(x**2) + 1e-12))


def frame_energy_dbfs(samples: np.ndarray, rate: int, win_ms: int = 20, hop_ms: int = 10):
    """Energy in dBFS of ``win_ms`` windows every ``hop_ms`` (as the sample clips measure it)."""
    win, hop = rate * win_ms // 1000, rate * hop_ms // 1000
    if len(samples) < win:
        return np.array([-120.0]), win, hop
    starts = np.arange(0, len(samples) - win + 1, hop)
    return np.array([level_dbfs(samples[s : s + win]) for s in starts]), win, hop


def speech_bounds(
    samples: np.ndarray, rate: int, thresholds_dbfs: tuple[float, float] | None = None
) -> tuple[int, int] | None:
    """First and last speech sample by the energy rule (the one the sample clips publish).

    low = max(peak - 35 dB, 10th percentile + 10 dB), high = max(peak - 20 dB, low); a run of
    frames at or above ``low`` lasting >= 30 ms that reaches ``high`` is speech. Used to place
    ``speech_start``/``speech_end`` exactly in replay. ``thresholds_dbfs`` (low, high) fixes
    the thresholds instead, e.g. to apply a clip's published thresholds to a recording.
    """
    runs = speech_runs(samples, rate, thresholds_dbfs)
    return (runs[0][0], runs[-1][1]) if runs else None


def speech_runs(
    samples: np.ndarray, rate: int, thresholds_dbfs: tuple[float, float] | None = None
) -> list[tuple[int, int]]:
    """Each stretch of speech by the energy rule of ``speech_bounds``, as [start, end)
    sample positions: the voice itself, not the pauses between its words."""
    db, win, hop = frame_energy_dbfs(samples, rate)
    peak = db.max()
    if thresholds_dbfs is not None:
        low, high = thresholds_dbfs
    elif peak < -60:
        return []
    else:
        low = max(peak - 35, np.percentile(db, 10) + 10)
        high = max(peak - 20, low)
    runs, start = [], None
    for i, value in enumerate(np.append(db, -np.inf)):
        if value >= low and start is None:
            start = i
        elif value < low and start is not None:
            runs.append((start, i - 1))
            start = None
    return [
        (a * hop, min(len(samples), b * hop + win))
        for a, b in runs
        if (b - a) * hop + win >= rate * 30 // 1000 and db[a : b + 1].max() >= high
    ]


class RecentAudio:
    """The last ``ms`` milliseconds of 16-bit audio: the pre-roll kept before a VAD start."""

    def __init__(self, rate: int, ms: int) -> None:
        self._keep = rate * ms // 1000 * 2
        self._buf = bytearray()

    def add(self, pcm: bytes) -> None:
        self._buf += pcm
        del self._buf[: max(0, len(self._buf) - self._keep)]

    def snapshot(self) -> bytearray:
        return bytearray(self._buf)
