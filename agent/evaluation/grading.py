"""Grade one replayed call clip by clip: what was heard, when the bot spoke, what it said.

Turns belong to the clip that was playing when they opened. Speech bounds, bot onsets and
talk-over are read off call.wav (channel 0: the caller as pushed, channel 1: the bot as
played), so a cut-off is a fact of the recording, not of the agent's own logs.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf

from agent.audio import speech_runs
from agent.evaluation.answers import CallAnswers
from agent.evaluation.manifest import Clip
from agent.evaluation.text import duplicated_phrases, stray_words, word_count, word_errors
from agent.recognition.numbers import spoken_digits
from agent.timing.record import TurnRecord
from agent.transports.replay import PlayedClip

BOT_GAP_MS = 300  # bot silence this long between two sounds makes the second a new onset
FRAME_MS = 10  # talk-over is counted in frames this long: bot sounding, caller speaking


@dataclass
class ClipGrade:
    """One clip of the call, graded; times in ms on the call clock."""

    clip: str
    reference: str
    streaming_text: str
    offline_text: str
    streaming_errors: int
    offline_errors: int
    duplicated: list[str]  # phrases heard more often than said (stitching)
    stray: list[str]  # words heard outside the reference's span (noise heard as speech)
    reference_words: int
    expected_turns: int
    turns: int
    empty_turns: int
    splits: int
    merged: bool  # its speech went into the previous clip's turn
    pauses: int
    speech_start_ms: float | None
    speech_end_ms: float | None
    cutoffs: list[float]  # bot onsets inside the caller's speech
    voice_to_voice_ms: float | None  # speech end -> the bot's first onset after it
    endpointing_ms: list[float]
    ended_by: list[str | None]
    answers: list[str]
    answer_problems: list[list[str]]
    record_voice_to_voice_ms: list[float | None] = field(default_factory=list)
    talk_over_ms: float = 0.0  # bot audio over the caller's voice while the clip played
    talk_over_turns_ms: list[float] = field(default_factory=list)  # the same, by answer
    words_lost: int = 0  # turns whose final has fewer words than their last interim
    digits: str | None = None  # the number read out (dictation clips)
    digits_heard: list[str] = field(default_factory=list)  # each turn's digits, in order
    digits_recalled: int | None = None  # the number's digits heard, in order, over all turns
    dictation_whole: bool | None = None  # one turn holds the whole number, in order

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def bot_onsets(bot: np.ndarray, rate: int, gap_ms: int = BOT_GAP_MS) -> list[int]:
    """Sample positions where the bot starts sounding after ``gap_ms`` of exact silence."""
    sounding = np.flatnonzero(bot)
    if len(sounding) == 0:
        return []
    breaks = np.flatnonzero(np.diff(sounding) > rate * gap_ms // 1000)
    return [int(sounding[0])] + sounding[breaks + 1].astype(int).tolist()


def _turn_opened_ms(record: TurnRecord) -> float | None:
    for key in ("speech_start", "turn_end", "stt_final"):
        if (at := record.events[key]) is not None:
            return float(at)
    return None


def assign_turns(records: list[TurnRecord], played: list[PlayedClip]) -> list[list[TurnRecord]]:
    """The turn records of each clip: those that opened while it (or the silence after it)
    was playing."""
    starts = [p.start_ms for p in played]
    out: list[list[TurnRecord]] = [[] for _ in played]
    for record in records:
        opened = _turn_opened_ms(record)
        if opened is None:
            continue
        i = max(0, int(np.searchsorted(starts, opened, side="right")) - 1)
        out[i].append(record)
    return out


def _voice_runs(user: np.ndarray, rate: int, play: PlayedClip) -> list[tuple[float, float]]:
    """The clip's stretches of voice on the call clock (ms), from call.wav."""
    a, b = (int(play.start_ms * rate / 1000), int(play.end_ms * rate / 1000))
    return [
        (round((a + s) * 1000 / rate, 1), round((a + e) * 1000 / rate, 1))
        for s, e in speech_runs(user[a:b], rate)
    ]


def talk_over_frames(
    user_runs: list[tuple[float, float]], bot: np.ndarray, rate: int
) -> np.ndarray:
    """Per ``FRAME_MS`` frame of the call: the bot sounds while the caller's voice does
    (``user_runs``: its stretches of voice, ms)."""
    hop = rate * FRAME_MS // 1000
    n = len(bot) // hop
    bot_on = np.any(bot[: n * hop].reshape(n, hop) != 0, axis=1)
    caller_on = np.zeros(n, dtype=bool)
    for start, end in user_runs:
        caller_on[int(start // FRAME_MS) : int(np.ceil(end / FRAME_MS))] = True
    return bot_on & caller_on


def talk_over_ms(over: np.ndarray, start_ms: float, end_ms: float) -> float:
    """Milliseconds of talk-over (``talk_over_frames``) between two times of the call."""
    a, b = int(start_ms // FRAME_MS), int(min(len(over), np.ceil(end_ms / FRAME_MS)))
    return float(np.count_nonzero(over[a:b]) * FRAME_MS) if b > a else 0.0


def in_order(heard: str, said: str) -> int:
    """How many of ``said``'s digits ``heard`` holds in the same order (the longest common
    subsequence): a digit dropped, added or swapped costs one."""
    row = [0] * (len(said) + 1)
    for h in heard:
        prev = 0
        for j, s in enumerate(said, 1):
            prev, row[j] = row[j], prev + 1 if h == s else max(row[j], row[j - 1])
    return row[-1]


def _merged(turns: list[TurnRecord], start: float | None, before: list[TurnRecord]) -> bool:
    """Whether a clip's speech went into the previous clip's turn: no turn opened in it, and
    that one ended after its speech began."""
    if turns or start is None or not before:
        return False
    return (before[-1].events["turn_end"] or 0) >= start


def _answer_talk_over(over: np.ndarray, record: TurnRecord, answered: list[float]) -> float:
    """The talk-over of one turn's answer: from its first audio to the next answer's."""
    start = record.events["first_audio_out"]
    if start is None:
        return 0.0
    later = [at for at in answered if at > start]
    return talk_over_ms(over, start, later[0] if later else float("inf"))


def grade_call(
    call_wav: Path,
    clips: list[Clip],
    played: list[PlayedClip],
    records: list[TurnRecord],
    offline: list[str],
) -> list[ClipGrade]:
    """Every clip of one call, graded."""
    audio, rate = sf.read(str(call_wav), dtype="int16", always_2d=True)
    user, bot = audio[:, 0], audio[:, 1]
    onsets = [s * 1000 / rate for s in bot_onsets(bot, rate)]
    by_clip = assign_turns(records, played)
    voice = [_voice_runs(user, rate, play) for play in played]
    over = talk_over_frames([run for runs in voice for run in runs], bot, rate)
    spans = [(runs[0][0], runs[-1][1]) if runs else (None, None) for runs in voice]
    answered = sorted(at for r in records if (at := r.events["first_audio_out"]) is not None)
    merged = [
        _merged(turns, start, before)
        for turns, (start, _), before in zip(by_clip, spans, [[], *by_clip], strict=False)
    ]
    answers = CallAnswers()
    grades: list[ClipGrade] = []
    for i, (clip, turns, (start, end)) in enumerate(zip(clips, by_clip, spans, strict=True)):
        window_end = played[i + 1].start_ms if i + 1 < len(played) else float("inf")
        cut = [t for t in onsets if start is not None and end is not None and start < t < end]
        after = [t for t in onsets if end is not None and end <= t < window_end]
        streaming = " ".join(r.user_text for r in turns if r.user_text).strip()
        s_err, n_ref = word_errors(clip.text, streaming)
        o_err, _ = word_errors(clip.text, offline[i])
        heard = [r for r in turns if r.user_text.strip()]
        # when the next clip merged into this one's turn, its last words are that clip's
        next_merged = i + 1 < len(merged) and merged[i + 1]
        checks = [answers.check(r.user_text, r.bot_text) for r in turns]
        digits = [spoken_digits(r.user_text) for r in turns]
        grades.append(
            ClipGrade(
                clip=clip.file,
                reference=clip.text,
                streaming_text=streaming,
                offline_text=offline[i],
                streaming_errors=s_err,
                offline_errors=o_err,
                duplicated=duplicated_phrases(clip.text, streaming),
                stray=stray_words(clip.text, streaming, trailing=not next_merged),
                reference_words=n_ref,
                expected_turns=clip.expect_turns,
                turns=len(turns),
                empty_turns=len(turns) - len(heard),
                splits=max(0, len(heard) - clip.expect_turns),
                merged=merged[i],
                pauses=len(clip.pauses),
                speech_start_ms=start,
                speech_end_ms=end,
                cutoffs=[round(t, 1) for t in cut],
                voice_to_voice_ms=round(after[0] - end, 1) if after and end is not None else None,
                endpointing_ms=[ms for r in turns if (ms := r.stages["endpointing"]) is not None],
                ended_by=[r.turn_end_reason for r in turns],
                answers=[r.bot_text for r in turns],
                answer_problems=[c.problems for c in checks],
                record_voice_to_voice_ms=[r.voice_to_voice_ms for r in turns],
                talk_over_ms=talk_over_ms(over, played[i].start_ms, window_end),
                talk_over_turns_ms=[_answer_talk_over(over, r, answered) for r in turns],
                words_lost=sum(
                    1 for r in turns if word_count(r.user_text) < word_count(r.last_interim_text)
                ),
                digits=clip.digits,
                digits_heard=digits if clip.digits else [],
                digits_recalled=in_order("".join(digits), clip.digits) if clip.digits else None,
                dictation_whole=clip.digits in digits if clip.digits else None,
            )
        )
    return grades
