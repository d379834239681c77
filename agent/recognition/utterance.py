"""The audio and text of one turn as recognition sees it, and how long turns are committed.

Interims carry a confirmed prefix: the words two consecutive passes agree on (LocalAgreement).
Whisper reads at most 30 s, and a pass costs more the more audio it reads, so past
``COMMIT_AFTER_SECS`` the whole sentences that end well before the end of the audio
(``KEEP_SECS``) are committed: their text is kept, the audio
up to the quietest moment near the last committed word's end is dropped (the committed
text is not given to the decoder as a prompt: see whisper_decoder). A word cut in two can
come back at the start of the next pass: leading words that repeat the committed tail are
dropped. Passes are tagged with the trim generation they read, so a pass over audio that has
since been trimmed is never combined with the new committed text.

No Pipecat here: the streaming service and offline tools drive this the same way.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from agent.recognition.whisper_decoder import RATE, Context, Pass, Word

COMMIT_AFTER_SECS = 10.0  # passes over 10 s take about 200 ms on 2 cores; 28 s take 800 ms
KEEP_SECS = 2.0  # only words ending this long before the end of the audio are committed
TRIM_SEARCH_SECS = (0.15, 0.1)  # look this far before / after the word's end for a quiet cut
FORCE_COMMIT_SECS = 20.0  # past this, commit even where no phrase ends (at the longest gap)
MAX_OVERLAP_WORDS = 4
NEW_TOKENS_PER_SEC = 6  # what audio since the last pass may add: fast speech, with stamps
NOISE_MAX_SECS = 0.8  # a sound this short with no word in it is a hiss, a click or a breath


FILLERS = {"uh", "um", "umm", "hmm", "mm", "mhm", "ah", "er", "erm", "eh", "oh"}


def has_words(text: str) -> bool:
    """Whether a transcript holds a spoken word: a hiss or a click comes out as a lone letter
    ("S,", "S-L-S-L-"), a hesitation as a filler, and neither makes a turn."""
    tokens = re.split(r"[\s\-]+", text.lower())
    return any(
        (len(re.sub(r"[^a-z]", "", t)) >= 2 or re.search(r"\d", t)) and _key(t) not in FILLERS
        for t in tokens
    )


def _key(word: str) -> str:
    return re.sub(r"[^a-z0-9']", "", word.lower())


def agreed_prefix(a: str, b: str) -> str:
    """The words two hypotheses agree on from the start (LocalAgreement)."""
    out = []
    for x, y in zip(a.split(), b.split(), strict=False):
        if _key(x) != _key(y):
            break
        out.append(y)
    return " ".join(out)


def drop_overlap(committed: list[str], words: list[str]) -> list[str]:
    """``words`` without a leading run that repeats the end of ``committed``."""
    tail = [_key(w) for w in committed[-MAX_OVERLAP_WORDS:]]
    head = [_key(w) for w in words]
    for n in range(min(len(tail), len(head)), 0, -1):
        if tail[-n:] == head[:n]:
            return words[n:]
    return words


def quietest_cut(samples: np.ndarray, at: int, before: int, after: int) -> int:
    """The sample index of the quietest 10 ms within [at - before, at + after]."""
    hop = RATE // 100
    lo, hi = max(0, at - before), min(len(samples), at + after)
    if hi - lo < hop:
        return min(max(at, 0), len(samples))
    x = samples[lo:hi].astype(np.float64)
    energy = [float(np.mean(x[i : i + hop] ** 2)) for i in range(0, len(x) - hop + 1, hop)]
    return lo + int(np.argmin(energy)) * hop + hop // 2


def _phrase_end(words: list[str], timed: list[Word], *, force: bool) -> int:
    """How many of the committable words to commit: through the last sentence end.

    Whisper drops the fragment of a sentence at the start of a window, so a cut mid-sentence
    loses words (measured: a cut after a comma lost the rest of the sentence). With no
    sentence end, wait, unless the audio nears the 30 s window: then cut at the longest pause.
    """
    ends = [i + 1 for i, w in enumerate(words) if w[-1] in ".?!"]
    if ends:
        return ends[-1]
    if not force or len(timed) < 2:
        return 0
    gaps = [timed[i + 1].start - timed[i].end for i in range(len(timed) - 1)]
    return int(np.argmax(gaps)) + 1


@dataclass
class Snapshot:
    """What one pass reads: the audio since the last trim."""

    audio: np.ndarray  # float32
    generation: int
    want_words: bool
    expect_tokens: int | None = None  # the text's likely length (see WhisperDecoder)
    context: Context | None = None  # the caller's words just before the turn


@dataclass
class Interim:
    text: str
    confirmed: str


class Utterance:
    """One turn's audio since the last trim, its committed words and the last hypothesis.

    ``context``: the caller's previous turn, when this one goes on from it; passes read it
    once the turn's own audio is longer than ``context_after_secs`` (a shorter sound may be
    noise, which Whisper's no-speech probability tells only without it), until a trim.
    """

    def __init__(
        self,
        pre_roll: bytes = b"",
        context: Context | None = None,
        context_after_secs: float = 0.0,
    ) -> None:
        self._pcm = bytearray(pre_roll)
        self._context = context
        self._context_after = context_after_secs
        self.committed: list[str] = []
        self.generation = 0
        self._last = ""
        self._last_pass: Pass | None = None  # the latest interim pass over this generation

    def add(self, pcm: bytes) -> None:
        self._pcm += pcm

    @property
    def secs(self) -> float:
        return len(self._pcm) / 2 / RATE

    @property
    def committed_text(self) -> str:
        return " ".join(self.committed)

    @property
    def has_context(self) -> bool:
        return self._context is not None

    @property
    def pcm(self) -> bytes:
        """The turn's own audio since the last trim."""
        return bytes(self._pcm)

    def own_words(self, text: str) -> str:
        """The words of the turn's text heard in its audio since the last trim."""
        return " ".join(text.split()[len(self.committed) :])

    def snapshot(self) -> Snapshot:
        audio = np.frombuffer(bytes(self._pcm), dtype=np.int16).astype(np.float32) / 32768.0
        expect = None
        if self._last_pass is not None:
            grown = max(0.0, self.secs - self._last_pass.audio_secs)
            expect = self._last_pass.tokens + math.ceil(grown * NEW_TOKENS_PER_SEC)
        context = self._context if self.secs > self._context_after else None
        return Snapshot(audio, self.generation, self.secs >= COMMIT_AFTER_SECS, expect, context)

    def text(self, result: Pass) -> str:
        """The whole turn's text: committed words, then this pass's (without a repeat)."""
        return " ".join(self.committed + drop_overlap(self.committed, result.text.split()))

    def update(self, snap: Snapshot, result: Pass) -> Interim | None:
        """Take an interim pass: LocalAgreement, and a commit when the audio runs long.

        Returns None for a pass over audio that has been trimmed since.
        """
        if snap.generation != self.generation:
            return None
        self._last_pass = result
        words = drop_overlap(self.committed, result.text.split())
        current = " ".join(words)
        confirmed = agreed_prefix(self._last, current).split()
        self._last = current
        interim = Interim(
            text=" ".join(self.committed + words),
            confirmed=" ".join(self.committed + confirmed),
        )
        if snap.want_words and result.words:
            self._commit(snap, result, words)
        return interim

    def _commit(self, snap: Snapshot, result: Pass, words: list[str]) -> None:
        """Commit the words that end well before the end of the audio; trim after them.

        Not only the words two passes agree on: tiny.en's unsteady words ("Jadakzu",
        "Jadaksu") kept agreement short of any sentence end until the forced cut, which
        lost words. Two seconds of audio after a word are what steadies it.
        """
        timed = result.words[len(result.text.split()) - len(words) :]
        limit = result.audio_secs - KEEP_SECS
        n = 0
        while n < len(timed) and timed[n].end <= limit:
            n += 1
        n = _phrase_end(words[:n], timed[:n], force=result.audio_secs >= FORCE_COMMIT_SECS)
        if n == 0:
            return
        at = int(timed[n - 1].end * RATE)
        before, after = (int(s * RATE) for s in TRIM_SEARCH_SECS)
        if n < len(timed):  # never cut into the next word
            after = min(after, max(0, int(timed[n].start * RATE) - at))
        cut = quietest_cut(snap.audio, at, before, after)
        self.committed += words[:n]
        del self._pcm[: cut * 2]
        self._context = None  # the committed words carry the turn on from here
        self.generation += 1
        self._last = ""
        self._last_pass = None
