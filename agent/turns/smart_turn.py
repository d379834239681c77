"""Smart Turn v3's signal: its verdict on the turn's audio so far, against a bar that falls as
the silence grows."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
from pipecat.audio.turn.smart_turn.local_smart_turn_v3 import LocalSmartTurnAnalyzerV3

from agent.audio import RecentAudio
from agent.timing import cpu
from agent.turns.pipecat_compat import smart_turn_probability

SMART_TURN_MAX_SECS = 8
# Smart Turn hears the turn from this long before its speech start (pipecat's pre-speech):
# the caller's previous turn in its window made a one-word answer ("Yes.") sound unfinished.
SMART_TURN_LEAD_SECS = 0.5


@dataclass(frozen=True)
class SmartTurnBar:
    """How sure Smart Turn must be to end the turn after a given silence: ``sure`` at the stop
    window, falling to ``lean`` once the silence reaches ``patience``; words that end a
    sentence lower it by ``text_credit`` ("smart_turn_and_text"); unfinished words end
    nothing before ``patience``. A caller who pauses mid-thought is rarely silent long, so a
    short silence needs a confident verdict and a long one a likely one."""

    stop_secs: float
    sure: float
    lean: float
    patience: float
    text_credit: float
    reason = "smart_turn"
    reason_with_text = "smart_turn_and_text"

    def bar(self, silence_secs: float, sentence: bool, unfinished: bool = False) -> float:
        """The probability that ends the turn after ``silence_secs`` of silence;
        ``unfinished``: none ends it before ``patience``, and the words earn no credit."""
        if unfinished:
            return self.lean if silence_secs >= self.patience else float("inf")
        span = max(1e-6, self.patience - self.stop_secs)
        f = min(1.0, max(0.0, (silence_secs - self.stop_secs) / span))
        return self.sure + (self.lean - self.sure) * f - (self.text_credit if sentence else 0.0)

    def ends(
        self, probability: float, silence_secs: float, sentence: bool, unfinished: bool = False
    ) -> bool:
        return probability >= self.bar(silence_secs, sentence, unfinished)


class SmartTurnJudge:
    """Smart Turn's verdicts for one call, on a thread of the call's own: the audio of the
    turn and its lead-in (at most the last 8 s), and the verdict asked at the VAD's pause."""

    def __init__(self, model: LocalSmartTurnAnalyzerV3, rate: int) -> None:
        self._model = model
        self._rate = rate
        self._recent = RecentAudio(rate, SMART_TURN_MAX_SECS * 1000)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="smart-turn")
        self.at_pause: asyncio.Future | None = None  # the verdict asked as the VAD paused

    def hear(self, pcm: bytes) -> None:
        self._recent.add(pcm)

    def judge(self, turn_samples: int) -> asyncio.Future:
        """The verdict on the turn's last ``turn_samples`` and its lead-in. First asked as the
        VAD pauses, not after the stop window: the verdict is ready when the window ends, and
        its CPU time no longer collides with the answer's first tokens (the LLM starts on the
        pause transcript)."""
        lead = round(SMART_TURN_LEAD_SECS * self._rate)
        heard = np.frombuffer(bytes(self._recent.snapshot()), dtype=np.int16)
        audio = heard[-max(1, turn_samples + lead) :]
        return asyncio.get_running_loop().run_in_executor(
            self._pool, cpu.marked("smart_turn", "smart_turn", self.probability), audio
        )

    def probability(self, audio: np.ndarray) -> float:
        return smart_turn_probability(self._model, audio.astype(np.float32) / 32768.0)

    def ask_at_pause(self, turn_samples: int) -> None:
        self.drop()
        self.at_pause = self.judge(turn_samples)

    def forget_pause(self) -> None:
        """The turn ended: the pause's verdict, done or not, no longer holds."""
        self.at_pause = None

    def drop(self) -> None:
        if self.at_pause is not None:
            self.at_pause.cancel()  # a verdict not yet started never runs
            self.at_pause = None

    @property
    def judging(self) -> bool:
        return self.at_pause is not None and not self.at_pause.done()

    def close(self) -> None:
        self.drop()
        self._pool.shutdown(wait=False, cancel_futures=True)
