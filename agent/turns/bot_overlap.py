"""A voice while the bot talks (or while its answer is due): hold the bot's audio at once, and
tell a barge-in from a backchannel ("mm-hmm", "yeah", "okay"), which lets the answer go on."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from agent.clock import CallClock
from agent.frames import HoldBotAudioFrame
from agent.turns.backchannel import is_backchannel
from agent.turns.options import BotOverlapOptions

OVERLAP_WORDS_WAIT_SECS = 0.3  # how long a voice over the bot waits for its words


class BotAudioHold:
    """Holds the bot's audio on a sound or voiced window over it, or before the answer has
    begun (a caller going on after a pause must not hear it start over them); releases it
    after ``hold_release_secs`` without voice."""

    def __init__(self, options: BotOverlapOptions, clock: CallClock) -> None:
        self._options, self._clock = options, clock
        self.holding = False
        self.held_at: float | None = None  # when the hold began (first sound or voiced window)
        self.before_answer = False  # the hold began before the answer's first audio
        self._quiet_since: float | None = None  # in a hold: since when the VAD is quiet

    async def update(
        self,
        *,
        quiet: bool,
        voiced: bool,
        onset: bool,
        bot_speaking: bool,
        answer_due: bool,
        awaiting_words: bool,
        push: Callable[[HoldBotAudioFrame], Awaitable[None]],
    ) -> None:
        """One frame outside a turn: ``quiet``, the VAD's state; ``voiced``, ``onset``: a
        voiced window, a sound; ``awaiting_words``: recognition has not said yet what the
        voice over the bot was (the hold stays)."""
        now = self._clock.now_ms()
        if (voiced or onset) and (bot_speaking or answer_due) and not self.holding:
            self.holding, self.held_at, self._quiet_since = True, now, None
            self.before_answer = not bot_speaking
            await push(HoldBotAudioFrame(hold=True, before_answer=self.before_answer))
        elif self.holding and quiet and not voiced and not awaiting_words:
            self._quiet_since = self._quiet_since or now
            if now - self._quiet_since >= self._options.hold_release_secs * 1000:
                self.holding = False
                await push(HoldBotAudioFrame(hold=False))
        elif self.holding:
            self._quiet_since = None

    @property
    def caller_went_on(self) -> bool:
        """The hold began before the answer's audio: the caller was first."""
        return self.holding and self.before_answer


class VoiceOverBot:
    """A voice over the bot, from ``started_at`` (call ms): a barge-in once it has lasted
    ``barge_in_secs``, unless its words are a backchannel, which only holds the bot's audio
    until the voice ends. Recognition is asked for the words then (or when the voice ends
    sooner); a voice that goes on past ``backchannel_max_secs``, or goes on after the bot
    stopped, is the caller's turn whatever it says."""

    def __init__(self, options: BotOverlapOptions, clock: CallClock) -> None:
        self._options, self._clock = options, clock
        self.started_at: float | None = None
        self._asked_at: float | None = None  # when recognition was asked its words
        self._words: str | None = None  # its answer

    def begin(self, start: float) -> None:
        self.end()
        self.started_at = start

    def end(self) -> None:
        self.started_at = None
        self._asked_at = None
        self._words = None

    def heard(self, text: str) -> None:
        """Recognition's words for the voice (a late answer to an overlap since ended is
        dropped)."""
        if self.started_at is not None and self._asked_at is not None:
            self._words = text

    @property
    def awaiting_words(self) -> bool:
        """Recognition was asked what the voice over the bot said and has not answered."""
        return self._asked_at is not None and self._words is None

    async def barges_in(
        self, *, quiet: bool, bot_speaking: bool, ask: Callable[[], Awaitable[None]]
    ) -> bool:
        """Whether the voice is now a barge-in (``quiet``: the VAD hears none now); it may
        end the overlap (a backchannel, or a sound too short) or ``ask`` for its words."""
        assert self.started_at is not None
        options = self._options
        now = self._clock.now_ms()
        lasted = now - self.started_at
        max_secs = options.backchannel_max_secs
        if max_secs is None or not options.hold_on_speech:  # the voice's length alone
            if quiet:
                self.end()
                return False
            return not bot_speaking or lasted >= options.barge_in_secs * 1000
        if not quiet and not bot_speaking:
            return True
        if self._asked_at is None and (quiet or lasted >= options.barge_in_secs * 1000):
            self._asked_at = now
            await ask()
        words = self._words
        if words is not None and not is_backchannel(words):
            return True  # "wait", "no, stop", a question: an interruption
        if not quiet and lasted >= max_secs * 1000:
            return True  # too long for an acknowledgement
        if words is None and self._asked_at is not None:
            if now - self._asked_at >= OVERLAP_WORDS_WAIT_SECS * 1000:
                # no words came (no recogniser, or a slow one): the voice's length decides
                if quiet:
                    self.end()
                    return False
                return True
        elif quiet and words is not None:
            self.end()  # a backchannel, over: the hold's release resumes the answer
        return False
