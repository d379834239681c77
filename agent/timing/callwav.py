"""Voice-to-voice read off a call.wav alone, so pipelines without our turn timer can be compared.

A replay call's channel 0 holds each user clip as pushed, separated by exact digital silence
(the replay input pushes zeros while it waits for the bot); channel 1 holds the bot audio as
the speaker played it. For each turn: the user's speech end is found in that turn's stretch of
channel 0 with the clip's published energy thresholds (agent/samples/manifest.jsonl), and the
answer starts at the first non-zero bot sample after it, before the next turn starts.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import soundfile as sf

from agent.audio import speech_bounds

MIN_GAP_MS = 100  # exact zeros this long on channel 0 separate stretches of pushed audio


@dataclass
class CallTurn:
    """One user turn as heard in call.wav; times in ms from the call's start."""

    turn: int
    clip: str
    user_start_ms: float  # first pushed sample of the clip
    speech_end_ms: float | None
    bot_start_ms: float | None  # first bot sample in this turn's window (may precede speech end)
    voice_to_voice_ms: float | None  # speech end -> first bot sample after it; None: no answer
    early: bool  # the bot was already talking when the user's speech ended (answered mid-turn)

    def as_dict(self) -> dict:
        return asdict(self)


def load_thresholds(manifest: Path) -> dict[str, tuple[float, float]]:
    """Each clip's published (low, high) energy thresholds, by file name."""
    out: dict[str, tuple[float, float]] = {}
    for line in manifest.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            t = row["energy_threshold_dbfs"]
            out[row["file"]] = (t["low"], t["high"])
    return out


def _islands(x: np.ndarray, min_gap: int) -> list[tuple[int, int]]:
    """[start, end) stretches of non-zero samples, joined across zero runs shorter than min_gap."""
    nz = np.flatnonzero(x)
    if len(nz) == 0:
        return []
    breaks = np.flatnonzero(np.diff(nz) > min_gap)
    starts = np.concatenate([[nz[0]], nz[breaks + 1]])
    ends = np.concatenate([nz[breaks], [nz[-1]]]) + 1
    return list(zip(starts.tolist(), ends.tolist(), strict=True))


def _group_turns(user: np.ndarray, clips: list[np.ndarray], rate: int) -> list[tuple[int, int]]:
    """One [start, end) stretch of channel 0 per clip, in order.

    Stretches are grouped greedily until they hold as many non-zero samples as the clip
    itself: a late push (a busy event loop) leaves a gap inside a clip, not a new turn.
    """
    islands = _islands(user, rate * MIN_GAP_MS // 1000)
    groups: list[tuple[int, int]] = []
    i = 0
    for clip in clips:
        want = int(np.count_nonzero(clip) * 0.95)
        if i >= len(islands):
            raise ValueError(f"call.wav has fewer user turns than the {len(clips)} clips given")
        start, got = islands[i][0], 0
        while i < len(islands) and got < want:
            got += int(np.count_nonzero(user[islands[i][0] : islands[i][1]]))
            end = islands[i][1]
            i += 1
        groups.append((start, end))
    return groups


def measure_call(
    call_wav: Path, clips: list[tuple[str, np.ndarray]], thresholds: dict[str, tuple[float, float]]
) -> list[CallTurn]:
    """Per-turn voice-to-voice from call.wav; ``clips``: (file name, int16 samples at its rate)."""
    audio, rate = sf.read(str(call_wav), dtype="int16", always_2d=True)
    user, bot = audio[:, 0], audio[:, 1]
    groups = _group_turns(user, [c for _, c in clips], rate)
    turns: list[CallTurn] = []
    for n, ((name, _), (start, end)) in enumerate(zip(clips, groups, strict=True), 1):
        window_end = groups[n][0] if n < len(groups) else len(bot)
        bounds = speech_bounds(user[start:end], rate, thresholds[Path(name).name])
        speech_end = start + bounds[1] if bounds else None
        answer = np.flatnonzero(bot[start:window_end])
        bot_start = start + int(answer[0]) if len(answer) else None
        v2v, early = None, False
        if speech_end is not None and bot_start is not None:
            early = bot_start < speech_end
            after = np.flatnonzero(bot[speech_end:window_end])
            if len(after):
                v2v = round(float(after[0]) * 1000 / rate, 1)
        turns.append(
            CallTurn(
                turn=n,
                clip=name,
                user_start_ms=round(start * 1000 / rate, 1),
                speech_end_ms=None if speech_end is None else round(speech_end * 1000 / rate, 1),
                bot_start_ms=None if bot_start is None else round(bot_start * 1000 / rate, 1),
                voice_to_voice_ms=v2v,
                early=early,
            )
        )
    return turns
