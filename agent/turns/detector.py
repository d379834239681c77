"""The turn detector: the thin processor that runs turn-taking's strategies on the call's audio
and the frames that come back upstream to it, and says what they decided.

Signals (each its own object): the VAD (``vad.SharedSileroVAD``), the hold and the voice over
the bot (``bot_overlap``), the lull (``lull``), Smart Turn's verdict against its falling bar
(``smart_turn``), the words at the pause (``pause_words``; ``words``, ``one_word``,
``finished_words``), the silence fallback (``max_silence``) and the continuation of the last
turn (``continuation``); ``policy.EndOfTurnPolicy`` asks the end-of-turn ones in order.

Frames out (audio passes straight through first, so recognition never waits on us):
- ``HoldBotAudioFrame`` while the bot talks, at the first loud sound (``SoundOnset``) or
  the VAD's first speech window: its audio stops at once, not ``vad_start_secs`` later;
  released when no speech is confirmed; the same between a turn's end and its answer's
  first audio, so a caller who goes on after a pause does not hear the answer start (their
  voice then opens their turn, even if the answer's audio began meanwhile: they were first);
- ``UserStartedSpeakingFrame`` when a turn opens (and an interruption if the bot is talking);
  an interruption too when the bot's audio starts while a turn is open (a greeting that
  came after the caller began, an answer that raced the caller's next turn): the bot never
  talks over a caller whose turn has not ended;
- ``SpeechLullFrame`` when the line has been quiet for ``lull_pass_ms`` while the VAD still
  hears a voice (recognition runs a pass then);
- ``SpeechPausedFrame`` the moment the VAD hears silence (recognition starts its
  speculative final pass, or keeps the lull's; Smart Turn starts judging the audio so far),
  ``VADUserStartedSpeakingFrame`` if speech resumes in the turn;
- ``VADUserStoppedSpeakingFrame`` when the stop window has passed;
- ``UserStoppedSpeakingFrame`` (``turn_end``) once Smart Turn's verdict clears the bar of
  ``EndOfTurnPolicy`` for the silence so far (judged at the pause and the stop window, then
  again at each of ``REJUDGE_SECS``; the bar falls as the silence grows, and lower when
  recognition's pause transcript ends a sentence), or the words end it without Smart Turn
  (a word alone, or a sentence the LLM takes as a whole message, after a longer silence),
  or the silence reaches ``max_silence_secs``. Both are checked as each audio frame
  arrives (which lets benchmarks run the detector faster than real time), the fallback on
  the wall clock too (a client may stop sending audio while it waits for the answer).

A turn whose speech starts within ``continuation_secs`` of the previous turn's end, with no
answer heard to its end in between, goes on from it: Smart Turn hears both, as it would have
had the first pause not ended the turn.
"""

from __future__ import annotations

import asyncio

from pipecat.audio.vad.vad_analyzer import VADState
from pipecat.frames.frames import (
    BotStartedSpeakingFrame,
    BotStoppedSpeakingFrame,
    CancelFrame,
    EndFrame,
    Frame,
    InputAudioRawFrame,
    UserStartedSpeakingFrame,
    UserStoppedSpeakingFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor

from agent.clock import CallClock
from agent.frames import (
    EndOfMessageFrame,
    HoldBotAudioFrame,
    OverlapCheckFrame,
    OverlapTranscriptFrame,
    PauseTranscriptFrame,
    SpeechLullFrame,
    SpeechPausedFrame,
    TimelineEventFrame,
    TurnEndReasonFrame,
)
from agent.recognition.utterance import NOISE_MAX_SECS, has_words
from agent.settings import TurnSettings
from agent.turns.bot_overlap import BotAudioHold, VoiceOverBot
from agent.turns.continuation import Continuation
from agent.turns.lull import Lull
from agent.turns.max_silence import MaxSilenceEnd
from agent.turns.options import TurnOptions
from agent.turns.pause_words import PauseWords
from agent.turns.smart_turn import SmartTurnJudge
from agent.turns.sound_onset import SoundOnset
from agent.turns.vad import SharedSileroVAD, TurnModels

# Silence (s) after which Smart Turn judges again when it has not yet ended the turn.
REJUDGE_SECS = (0.25, 0.35, 0.45, 0.6, 0.75, 0.9, 1.2)


class TurnDetector(FrameProcessor):
    """Decides when the caller starts and finishes a turn."""

    def __init__(
        self,
        settings: TurnSettings,
        models: TurnModels,
        clock: CallClock,
        *,
        rate: int,
        audio_clock_only: bool = False,
        words_judged: bool = False,
    ) -> None:
        """``words_judged``: an LLM stage downstream answers each pause transcript with an
        ``EndOfMessageFrame``, which a likely end of turn waits for."""
        super().__init__()
        options = TurnOptions.from_settings(settings)
        self._options = options
        # Audio not fed in real time (benchmarks, compute-paced replays): no wall-clock fallback.
        self._audio_clock_only = audio_clock_only or clock.compute_paced
        self._clock = clock
        self._rate = rate
        self._vad = SharedSileroVAD.for_turns(models.silero, options.vad, rate)
        self._smart_turn = SmartTurnJudge(models.smart_turn, rate) if options.smart_turn else None
        self._policy = options.end
        self._max_silence = MaxSilenceEnd(options.silence.max_silence_secs)
        self._hold = BotAudioHold(options.overlap, clock)
        self._overlap = VoiceOverBot(options.overlap, clock)
        self._words = PauseWords(clock)
        self._continuation = Continuation(options.silence.continuation_secs, rate)
        onset_db = options.overlap.hold_onset_db
        self._onset = None if onset_db is None else SoundOnset(onset_db)
        lull_ms = options.silence.lull_pass_ms
        self._lull = None if lull_ms is None else Lull(lull_ms, rate)
        self._wait_for_words = words_judged and self._policy.unfinished_below is not None
        self._state = VADState.QUIET
        self._in_turn = False
        self._bot_speaking = False
        self._answer_due = False  # the turn ended and its answer has not begun to play
        self._heard = 0  # input samples so far: where a lull began, for recognition
        self._silence_started: float | None = None
        self._speech_started_ms = 0.0  # where the open turn's speech began
        self._decision: asyncio.Task | None = None
        self._fallback_timer: asyncio.Task | None = None
        self._fallback_at_ms: float | None = None
        self._rejudge_at: list[float] = []  # call times of the judgements still to come
        self._words_heard = False

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        await self.push_frame(frame, direction)
        if isinstance(frame, BotStartedSpeakingFrame):
            self._bot_speaking = True
            self._answer_due = False
            if self._in_turn:  # it began over a caller already talking: it stops at once
                await self.broadcast_interruption()
        elif isinstance(frame, BotStoppedSpeakingFrame):
            self._bot_speaking = False
            if not self._in_turn and self._overlap.started_at is None:
                self._continuation.answered()
            if self._hold.holding:  # it had nothing left to say: the output must not stay held
                self._hold.holding = False
                await self.push_frame(HoldBotAudioFrame(hold=False))
        elif isinstance(frame, OverlapTranscriptFrame):
            self._overlap.heard(frame.text)
        elif isinstance(frame, PauseTranscriptFrame):
            self._words.heard(frame)
        elif isinstance(frame, EndOfMessageFrame):
            self._words.judged(frame)
        elif isinstance(frame, EndFrame | CancelFrame):
            await self._cancel_decision()
            if self._smart_turn is not None:
                self._smart_turn.close()
            await self._vad.cleanup()  # its analysis thread
        elif isinstance(frame, InputAudioRawFrame):
            await self._on_audio(frame.audio)

    @property
    def deciding(self) -> bool:
        """Smart Turn (or the wait for the pause transcript) is judging a stop right now."""
        judging = self._smart_turn is not None and self._smart_turn.judging
        return judging or (self._decision is not None and not self._decision.done())

    async def _on_audio(self, pcm: bytes) -> None:
        if self._smart_turn is not None:
            self._smart_turn.hear(pcm)
        self._heard += len(pcm) // 2
        state = await self._vad.analyze_audio(pcm)
        previous, self._state = self._state, state
        voiced, self._vad.peak_confidence = self._vad.peak_confidence, 0.0
        onset = self._onset is not None and self._onset.update(pcm, self._rate)
        await self._hold_or_release(state, voiced >= self._options.vad.confidence, onset)
        if self._lull is not None:
            self._lull.hear(pcm)
            if self._lull.due(self._in_turn, state == VADState.SPEAKING):
                await self.push_frame(SpeechLullFrame())
        if self._max_silence.ends(self._clock.now_ms(), self._fallback_at_ms):
            await self._end_turn(self._max_silence.reason, self._max_silence.secs)
        if self._rejudge_at and self._in_turn:
            self._maybe_rejudge()
        if self._overlap.started_at is not None:
            await self._confirm_barge_in(state)
        if state == previous:
            return
        if state == VADState.SPEAKING and previous != VADState.STOPPING:
            await self._speech_started()
        elif state == VADState.SPEAKING:  # STOPPING -> SPEAKING: only a short dip
            await self._speech_resumed()
        elif state == VADState.STOPPING:
            self._silence_started = self._clock.now_ms()
            quiet_from = None if self._lull is None else self._lull.quiet_from(self._heard)
            await self.push_frame(SpeechPausedFrame(quiet_from=quiet_from))
            if self._smart_turn is not None and self._in_turn:
                self._smart_turn.ask_at_pause(self._turn_samples)
        elif state == VADState.QUIET and previous == VADState.STOPPING:
            await self._speech_stopped()

    @property
    def _turn_samples(self) -> int:
        """How much of the audio heard so far is the open turn's (with a turn it goes on from)."""
        return self._heard - self._continuation.turn_from

    async def _hold_or_release(self, state: VADState, voiced: bool, onset: bool) -> None:
        if not self._options.overlap.hold_on_speech or self._in_turn:
            return
        await self._hold.update(
            quiet=state == VADState.QUIET,
            voiced=voiced,
            onset=onset,
            bot_speaking=self._bot_speaking,
            answer_due=self._answer_due,
            awaiting_words=self._overlap.awaiting_words,
            push=self.push_frame,
        )

    async def _speech_started(self) -> None:
        now = self._clock.now_ms()
        start = round(now - self._options.vad.start_secs * 1000, 1)
        if self._hold.holding and self._hold.held_at is not None:  # heard before a dip reset
            start = min(start, self._hold.held_at)
        await self._cancel_decision()
        if self._in_turn:
            await self._speech_resumed()
            return
        if self._bot_speaking and not self._hold.caller_went_on:  # else the caller was first
            self._overlap.begin(start)
            await self._confirm_barge_in(VADState.SPEAKING)
            return
        await self._open_turn(start)

    async def _confirm_barge_in(self, state: VADState) -> None:
        """A voice over the bot: the caller's turn once ``VoiceOverBot`` says it barges in."""
        quiet = state == VADState.QUIET
        ask = self._ask_overlap_words
        if await self._overlap.barges_in(quiet=quiet, bot_speaking=self._bot_speaking, ask=ask):
            await self._barge_in(state)

    async def _ask_overlap_words(self) -> None:
        await self.push_frame(OverlapCheckFrame())

    async def _barge_in(self, state: VADState) -> None:
        """The voice over the bot is the caller's turn: it opens where the voice began; a
        voice already over ("wait.") is judged at once, as if its stop had just passed."""
        start = self._overlap.started_at
        assert start is not None
        self._overlap.end()
        await self._open_turn(start)
        if state == VADState.QUIET:
            await self._speech_stopped()

    async def _open_turn(self, start: float) -> None:
        self._in_turn = True
        self._speech_started_ms = start
        self._continuation.open(
            self._heard - round((self._clock.now_ms() - start) * self._rate / 1000)
        )
        held_answer = self._hold.caller_went_on and not self._bot_speaking
        self._hold.holding = self._answer_due = False  # the interruption flushes the held audio
        await self.push_frame(TimelineEventFrame(event="speech_start", at_ms=start, exact=False))
        if self._bot_speaking:
            await self.broadcast_interruption()
        await self.broadcast_frame(UserStartedSpeakingFrame)
        if held_answer:
            # The context aggregator drops an answer it asked for at the frame above (its
            # interruption reaches the output first); the release frees the output if none was.
            await self.push_frame(HoldBotAudioFrame(hold=False))

    async def _speech_resumed(self) -> None:
        if self._smart_turn is not None:
            self._smart_turn.drop()
        self._silence_started = None
        self._fallback_at_ms = None
        self._rejudge_at = []
        self._words.forget()
        await self._cancel_decision()
        await self.push_frame(VADUserStartedSpeakingFrame())

    async def _speech_stopped(self) -> None:
        if not self._in_turn:
            return
        stopped_at = self._silence_started or self._clock.now_ms()
        await self.push_frame(TimelineEventFrame(event="speech_end", at_ms=stopped_at, exact=False))
        stop_secs = self._options.vad.stop_secs
        await self.push_frame(VADUserStoppedSpeakingFrame(stop_secs=stop_secs))
        self._decision = self.create_task(self._decide_end_of_turn(stopped_at))

    async def _decide_end_of_turn(self, silence_started_ms: float) -> None:
        with self._clock.busy():  # a compute-paced replay waits for the verdict
            verdict = await self._judge_stop()
        if verdict is not None:
            await self._end_turn(*verdict)
            return
        fallback_secs = self._max_silence.secs
        fallback = self._max_silence.deadline_ms(silence_started_ms)
        self._fallback_at_ms = fallback
        if self._smart_turn is not None and self._words_heard:
            later = [x for x in REJUDGE_SECS if self._policy.stop_secs < x < fallback_secs]
            self._rejudge_at = [silence_started_ms + x * 1000 for x in later]
        if not self._audio_clock_only:  # a task of its own: judging goes on meanwhile
            self._fallback_timer = self.create_task(self._fallback_on_wall_clock(fallback))

    async def _fallback_on_wall_clock(self, fallback: float) -> None:
        """The fallback on the wall clock too: a client may stop sending audio while it waits
        for the answer."""
        await asyncio.sleep(max(0.0, (fallback - self._clock.now_ms()) / 1000))
        if self._fallback_at_ms == fallback and self._in_turn:  # not ended, nor resumed
            await self._end_turn(self._max_silence.reason, self._max_silence.secs)

    async def _judge_stop(self) -> tuple[str, float] | None:
        """Which signal ends the turn at the stop window, with its value (None: none yet)."""
        self._words_heard = await self._heard_words()
        if not self._words_heard:
            return None  # a hiss or a click before the caller speaks: wait for the words
        judge = self._smart_turn
        if judge is None:
            return None
        # The pause's verdict, and when it does not end the turn alone one on the audio now: a
        # finished sentence can sound less finished 0.1 s into its silence than after the stop
        # window (on the phone line "We must find a new home in the stars." scored 0.02-0.08
        # at the pause, 0.10-0.19 later). A verdict that clears the bar already leaves the
        # cores to recognition and the LLM, which the turn's end waits for next.
        stop = self._policy.stop_secs
        probability = await (judge.at_pause or judge.judge(self._turn_samples))
        if not self._policy.ends(probability, stop, sentence=False):
            probability = max(probability, await judge.judge(self._turn_samples))
        if self._policy.ends(probability, stop, sentence=True):  # the words decide: wait briefly
            arrived = await self._words.text_arrived()
            if arrived and self._wait_for_words and has_words(self._words.text):
                await self._words.verdict_arrived()
        return self._verdict_ends(probability, stop)

    def _maybe_rejudge(self) -> None:
        """Once the silence reaches the next of ``REJUDGE_SECS``, Smart Turn judges again."""
        due = [at for at in self._rejudge_at if at <= self._clock.now_ms()]
        if not due or (self._decision is not None and not self._decision.done()):
            return
        self._rejudge_at = [at for at in self._rejudge_at if at > due[-1]]
        silence_secs = (due[-1] - (self._silence_started or due[-1])) / 1000
        self._decision = self.create_task(self._rejudge(silence_secs))

    async def _rejudge(self, silence_secs: float) -> None:
        verdict = self._verdict_ends(None, silence_secs)  # the words alone: no verdict needed
        if verdict is None:
            assert self._smart_turn is not None
            with self._clock.busy():
                probability = await self._smart_turn.judge(self._turn_samples)
            verdict = self._verdict_ends(probability, silence_secs)
        if verdict is not None and self._in_turn:
            await self._end_turn(*verdict)

    def _verdict_ends(
        self, probability: float | None, silence_secs: float
    ) -> tuple[str, float] | None:
        """Smart Turn's verdict (``probability``; None: the words alone) against the policy
        after this silence: the reason and value that end the turn, or None."""
        words = self._words
        text, words_end, goes_on = words.so_far, words.words_end, words.goes_on
        if probability is None:
            reason = self._policy.words_end_it(silence_secs, text, words_end, goes_on)
        else:
            reason = self._policy.verdict(probability, silence_secs, text, words_end, goes_on)
        if reason is None:
            return None
        value = {"one_word": silence_secs, "words": words_end}.get(reason, probability)
        return reason, round(value or 0.0, 3)

    async def _heard_words(self) -> bool:
        """Whether recognition's transcript at this pause holds a word. Only a short sound can
        be noise, so only a short turn waits for the transcript (True when it is late: only a
        transcript known to be noise holds the turn open)."""
        speech_secs = (self._silence_started or self._clock.now_ms()) - self._speech_started_ms
        if speech_secs / 1000 > NOISE_MAX_SECS:
            return True
        if not await self._words.text_arrived():
            return True
        return has_words(self._words.text)

    def _stop_fallback_timer(self) -> None:
        timer, self._fallback_timer = self._fallback_timer, None
        if timer is not None and timer is not asyncio.current_task():
            timer.cancel()

    async def _end_turn(self, reason: str, value: float) -> None:
        self._stop_fallback_timer()
        if self._smart_turn is not None:
            self._smart_turn.forget_pause()
        words = self._words
        ended = TurnEndReasonFrame(
            reason=reason,
            value=value,
            words=None if words.words_end is None else round(words.words_end, 4),
            goes_on=None if words.goes_on is None else round(words.goes_on, 4),
            text=words.so_far,
        )
        await self.push_frame(ended)
        self._continuation.ended(self._heard)
        self._in_turn = False
        self._answer_due = True
        self._fallback_at_ms = None
        self._rejudge_at = []
        words.forget()
        self._decision = None
        await self.broadcast_frame(UserStoppedSpeakingFrame)

    async def _cancel_decision(self) -> None:
        self._stop_fallback_timer()
        if self._decision is not None:
            await self.cancel_task(self._decision)
            self._decision = None
