"""Each turn's stretch of call.wav (both channels), as a WAV data URI the report can play offline.

call.wav puts the caller on channel 0 and the bot on channel 1 on the same timeline as the
turn events, so a turn's clip runs from a little before its speech_start to a little after
its bot audio ended, never into the next turn's speech.
"""

from __future__ import annotations

import base64
import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf

from agent.reports.load import Pool, Turn

PAD_MS = 400.0
END_EVENTS = ("bot_audio_end", "interrupted", "first_audio_out", "turn_end", "speech_end")


@dataclass(frozen=True)
class Clip:
    """A turn's audio (int16, n x 2), where it starts on the call timeline, or why there is none."""

    audio: np.ndarray | None
    rate: int
    start_ms: float
    missing: str | None = None

    def bot_silent_after(self, at_ms: float | None, floor: int = 300) -> bool:
        """True when first_audio_out is set but the bot channel stays silent from then on.

        voice_to_voice can be checked from call.wav alone (docs/design.md); this is that check
        for the start of the answer (floor: about -40 dBFS on int16).
        """
        if self.audio is None or at_ms is None:
            return False
        first = max(int((at_ms - self.start_ms) / 1000 * self.rate), 0)
        if first >= len(self.audio):
            return True
        return int(np.abs(self.audio[first:, 1].astype(np.int32)).max()) < floor

    def data_uri(self) -> str:
        """A 16-bit PCM stereo WAV as a data: URI (every browser plays it, no server needed)."""
        assert self.audio is not None
        buffer = io.BytesIO()
        sf.write(buffer, self.audio, self.rate, format="WAV", subtype="PCM_16")
        return "data:audio/wav;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def windows(turns: list[Turn]) -> list[tuple[float, float] | None]:
    """(start, end) in call ms per turn of one run, padded, stopping at the next turn's speech."""
    out: list[tuple[float, float] | None] = []
    for i, turn in enumerate(turns):
        events = turn.record.events
        first = events.get("speech_start") or events.get("speech_end")
        last = next((events[e] for e in END_EVENTS if events.get(e) is not None), None)
        if first is None or last is None:
            out.append(None)
            continue
        end = last + PAD_MS
        later = [
            start for t in turns[i + 1 :] if (start := t.record.events["speech_start"]) is not None
        ]
        if later:
            end = min(end, max(min(later) - 50.0, last))
        out.append((max(0.0, first - PAD_MS), end))
    return out


def _read(call_wav: Path, start_ms: float, end_ms: float) -> Clip:
    info = sf.info(str(call_wav))
    if info.channels != 2:
        return Clip(None, info.samplerate, start_ms, f"{call_wav} has {info.channels} channel(s)")
    a = int(start_ms / 1000 * info.samplerate)
    b = min(int(end_ms / 1000 * info.samplerate), info.frames)
    if b <= a:
        return Clip(None, info.samplerate, start_ms, f"the turn lies past the end of {call_wav}")
    audio, rate = sf.read(str(call_wav), start=a, stop=b, dtype="int16", always_2d=True)
    return Clip(audio, rate, a / rate * 1000.0)


def turn_clips(pool: Pool) -> dict[str, Clip]:
    """Every turn's clip by label; a turn whose run lacks a readable call.wav says why."""
    clips: dict[str, Clip] = {}
    for run in pool.runs:
        turns = [t for t in pool.turns if t.run == run]
        call_wav = run / "call.wav"
        for turn, window in zip(turns, windows(turns), strict=True):
            if not call_wav.is_file():
                clips[turn.label] = Clip(None, 0, 0.0, f"{call_wav} not found")
            elif window is None:
                clips[turn.label] = Clip(None, 0, 0.0, "the turn has no speech events")
            else:
                try:
                    clips[turn.label] = _read(call_wav, *window)
                except sf.LibsndfileError as exc:
                    clips[turn.label] = Clip(
                        None, 0, 0.0, f"{call_wav} is unreadable ({exc.error_string})"
                    )
    return clips
