"""End of turn: Silero VAD with a short stop window, Smart Turn v3, a maximum-silence fallback.

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
import copy
import functools
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
from pipecat.audio.turn.smart_turn.local_smart_turn_v3 import LocalSmartTurnAnalyzerV3
from pipecat.audio.vad.silero import SileroOnnxModel, SileroVADAnalyzer
from pipecat.audio.vad.vad_analyzer import VADAnalyzer, VADParams, VADState
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

from agent.audio import RecentAudio
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
from agent.turns.backchannel import is_backchannel, words_of
from agent.turns.openers import only_opens
from agent.turns.sound_onset import SoundOnset

SMART_TURN_MAX_SECS = 8
NARROWBAND_RATE = 8000  # Silero's telephone model
# Smart Turn hears the turn from this long before its speech start (pipecat's pre-speech):
# the caller's previous turn in its window made a one-word answer ("Yes.") sound unfinished.
SMART_TURN_LEAD_SECS = 0.5
PAUSE_TEXT_WAIT_SECS = 0.3  # how long a likely end of turn waits for the pause transcript
WORDS_WAIT_SECS = 0.3  # and then for the LLM's verdict on its words
# Silence (s) after which Smart Turn judges again when it has not yet ended the turn.
REJUDGE_SECS = (0.25, 0.35, 0.45, 0.6, 0.75, 0.9, 1.2)
OVERLAP_WORDS_WAIT_SECS = 0.3  # how long a voice over the bot waits for its words
LULL_MARGIN_DB = 10.0  # a frame this far over the line's noise floor is a sound, not a lull


def ends_sentence(text: str) -> bool:
    """Whether recognition's words so far end with a sentence's closing punctuation (before
    any closing quote or bracket)."""
    return text.rstrip().rstrip("\"'\u201d\u2019)]").endswith((".", "?", "!"))


NUMBER_WORDS = frozenset(
    "zero oh one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
    "fifteen sixteen seventeen eighteen nineteen twenty thirty forty fifty sixty seventy eighty "
    "ninety hundred thousand million point".split()
)


def one_word_sentence(text: str) -> bool:
    """A single word closed as a sentence ("Stop.", "Go.", "Yes."): a reply or a command.
    Openers ("Okay.", "Right.") promise more, and a number may be the first of several
    ("one [pause] zero zero one"), so neither is one."""
    words = [w for w in words_of(text) if has_words(w)]
    if len(words) != 1 or not ends_sentence(text) or only_opens(text):
        return False
    word = words[0]
    return word not in NUMBER_WORDS and not any(c.isdigit() for c in word)


@dataclass(frozen=True)
class EndOfTurnPolicy:
    """How sure Smart Turn must be to end the turn after a given silence.

    The bar falls as the silence grows: ``sure`` at the stop window, down to ``lean`` once the
    silence reaches ``patience``; a transcript that ends a sentence lowers it by
    ``text_credit``; unfinished words end nothing before ``patience``: openers alone ("Hi,",
    agent.turns.openers), or two words or more after which the LLM sees the message
    going on (its probability of an end there under ``unfinished_below``), that
    recognition closed with a full stop it nearly wrote as a comma (``goes_on_above``: the
    voice went on, as at "a long round arch, [pause] with its path"), or that it did not
    close at all (``unclosed_go_on``: "six spoons of fresh snow peas, [pause] five thick
    slabs"; Whisper punctuates from the voice too, and gives a finished sentence its mark).
    Recognition's punctuation holds the words only until ``patience``; past it they are
    judged as any words are, so a finished sentence it doubted does not wait for the silence
    fallback. A caller who pauses mid-thought is rarely silent long, so a short silence
    needs a confident verdict and a long one a likely one. A single word is exempt from the
    LLM's judgement: asked without the question it answers ("Three."), the model sees it as
    unfinished. Words that end a sentence and that the LLM takes as a whole message (at
    least ``finished_above``) end the turn after ``finished_secs`` whatever Smart Turn says:
    its verdict on one silence can swing from yes to no as the silence grows, and a finished
    sentence should not wait for the silence fallback.
    """

    stop_secs: float
    sure: float
    lean: float
    patience: float
    text_credit: float
    unfinished_below: float | None = None
    goes_on_above: float | None = None
    unclosed_go_on: bool = False
    one_word_secs: float | None = None
    finished_above: float | None = None
    finished_secs: float | None = None

    @classmethod
    def from_settings(cls, turn: TurnSettings) -> EndOfTurnPolicy:
        return cls(stop_secs=turn.vad_stop_secs, sure=turn.smart_turn_sure,
                   lean=turn.smart_turn_lean, patience=turn.patience_secs,
                   text_credit=turn.text_credit,
                   unfinished_below=turn.words_unfinished_below,
                   goes_on_above=turn.punctuation_goes_on_above,
                   unclosed_go_on=turn.unclosed_words_go_on,
                   one_word_secs=turn.one_word_secs,
                   finished_above=turn.words_finished_above,
                   finished_secs=turn.words_finished_secs)  # fmt: skip

    def unfinished(
        self,
        text: str,
        words_end: float | None,
        goes_on: float | None = None,
        silence_secs: float = 0.0,
    ) -> bool:
        """Whether the words so far say the caller goes on after ``silence_secs``;
        ``words_end``: the LLM's probability that the message ends after them, ``goes_on``:
        recognition's that a comma (not its full stop) follows them (``Pass.goes_on``; None:
        not known)."""
        if only_opens(text):
            return True
        if len(words_of(text)) < 2:
            return False
        below = self.unfinished_below
        if below is not None and words_end is not None and words_end < below:
            return True
        return silence_secs < self.patience and self._punctuation_goes_on(text, goes_on)

    def _punctuation_goes_on(self, text: str, goes_on: float | None) -> bool:
        """Recognition's punctuation says the words go on: it left them unclosed, or nearly
        wrote a comma where it closed them."""
        if self.unclosed_go_on and not ends_sentence(text):
            return True
        above = self.goes_on_above
        return above is not None and goes_on is not None and goes_on >= above

    def bar(self, silence_secs: float, sentence: bool, unfinished: bool = False) -> float:
        """The Smart Turn probability that ends the turn after ``silence_secs`` of silence;
        ``unfinished``: the words say the caller goes on, so none ends it before
        ``patience``, and they earn no credit."""
        if unfinished:
            return self.lean if silence_secs >= self.patience else float("inf")
        span = max(1e-6, self.patience - self.stop_secs)
        f = min(1.0, max(0.0, (silence_secs - self.stop_secs) / span))
        return self.sure + (self.lean - self.sure) * f - (self.text_credit if sentence else 0.0)

    def ends(
        self, probability: float, silence_secs: float, sentence: bool, unfinished: bool = False
    ) -> bool:
        return probability >= self.bar(silence_secs, sentence, unfinished)

    def verdict(
        self,
        probability: float,
        silence_secs: float,
        text: str,
        words_end: float | None,
        goes_on: float | None = None,
    ) -> str | None:
        """Which signal ends the turn after this silence, given Smart Turn's probability and
        the words so far (``text``, "" when not known yet): "smart_turn",
        "smart_turn_and_text" (only with the sentence's credit), or what ends it without
        Smart Turn (``words_end_it``), or None."""
        unfinished = self.unfinished(text, words_end, goes_on, silence_secs)
        if self.ends(probability, silence_secs, sentence=False, unfinished=unfinished):
            return "smart_turn"
        sentence = not unfinished and ends_sentence(text)
        if sentence and self.ends(probability, silence_secs, sentence=True):
            return "smart_turn_and_text"
        return self.words_end_it(silence_secs, text, words_end, goes_on)

    def words_end_it(
        self, silence_secs: float, text: str, words_end: float | None, goes_on: float | None = None
    ) -> str | None:
        """What ends the turn after this silence on the words alone, no verdict needed:
        "one_word" (a word alone closed as a sentence, after ``one_word_secs``), "words" (a
        sentence the LLM takes as a whole message, after ``finished_secs``), or None."""
        limit = self.one_word_secs
        if limit is not None and silence_secs >= limit and one_word_sentence(text):
            return "one_word"
        above, after = self.finished_above, self.finished_secs
        if (
            above is not None
            and after is not None
            and silence_secs >= after
            and words_end is not None
            and words_end >= above
            and ends_sentence(text)
            and not self.unfinished(text, words_end, goes_on, silence_secs)
        ):
            return "words"
        return None


@dataclass
class TurnModels:
    """The Silero VAD and Smart Turn ONNX sessions, loaded once per process.

    A session per call leaked: benchmarks/soak.py grew about 230 MiB a minute with 4 callers,
    80 MiB without Smart Turn. onnxruntime sessions may be run from many threads at once;
    what belongs to one call (Silero's recurrent state) lives in ``SharedSileroVAD``.
    """

    silero: SileroOnnxModel
    smart_turn: LocalSmartTurnAnalyzerV3  # loaded even when off: a call's settings may turn it on

    @classmethod
    @functools.cache  # once per process, however many pipelines ask
    def load(cls) -> TurnModels:
        template = SileroVADAnalyzer()  # finds pipecat's bundled model file
        return cls(silero=template._model, smart_turn=LocalSmartTurnAnalyzerV3())


class SharedSileroVAD(SileroVADAnalyzer):
    """Silero VAD for one call on the process's ONNX session (pipecat 1.14's attributes).

    ``peak_confidence``: the highest window confidence since the caller last reset it. The
    VAD's states also want a smoothed volume over ``min_volume``, which rises 100-200 ms
    after Silero hears a voice; a barge-in hold needs the voice alone. ``narrowband``: Silero's
    8 kHz model hears each 16 kHz window too, every second sample (a phone line holds nothing
    over 4 kHz to fold back), and the more confident of the two counts: on telephone speech
    the 16 kHz model hears pauses the caller did not make, and the 8 kHz one misses quiet words.
    """

    def __init__(
        self,
        model: SileroOnnxModel,
        *,
        sample_rate: int,
        params: VADParams,
        narrowband: bool = False,
    ) -> None:
        VADAnalyzer.__init__(self, sample_rate=sample_rate, params=params)
        self._model = copy.copy(model)  # same session, state of its own
        self._model.reset_states()
        self._narrow: SileroOnnxModel | None = None
        if narrowband and sample_rate == 2 * NARROWBAND_RATE:  # at 8 kHz it is the only one
            self._narrow = copy.copy(model)
            self._narrow.reset_states()
        self._windows_since_reset = 0
        self._low_confidence_windows = 0
        self.peak_confidence = 0.0

    @classmethod
    def for_turns(cls, model: SileroOnnxModel, turn: TurnSettings, rate: int) -> SharedSileroVAD:
        """The VAD the turn settings configure, at ``rate``."""
        params = VADParams(
            confidence=turn.vad_confidence,
            min_volume=turn.vad_min_volume,
            start_secs=turn.vad_start_secs,
            stop_secs=turn.vad_stop_secs,
        )
        vad = cls(model, sample_rate=rate, params=params, narrowband=turn.narrowband_vad)
        vad.set_sample_rate(rate)
        return vad

    def voice_confidence(self, buffer: bytes) -> float:
        confidence = float(np.max(super().voice_confidence(buffer)))
        if self._narrow is not None:
            samples = np.frombuffer(buffer, dtype=np.int16)[::2].astype(np.float32) / 32768.0
            confidence = max(confidence, float(np.max(self._narrow(samples, NARROWBAND_RATE))))
        self.peak_confidence = max(self.peak_confidence, confidence)
        return confidence

    def _maybe_reset_model(self, confidence: float) -> None:
        super()._maybe_reset_model(confidence)
        if self._narrow is not None and self._windows_since_reset == 0:  # reset just now
            self._narrow.reset_states()


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
        self._settings = settings
        # Audio not fed in real time (benchmarks, compute-paced replays): no wall-clock fallback.
        self._audio_clock_only = audio_clock_only or clock.compute_paced
        self._clock = clock
        self._rate = rate
        self._vad = SharedSileroVAD.for_turns(models.silero, settings, rate)
        self._smart_turn = models.smart_turn if settings.smart_turn else None
        self._state = VADState.QUIET
        self._in_turn = False
        self._bot_speaking = False
        self._answer_due = False  # the turn ended and its answer has not begun to play
        # What Smart Turn hears: the turn and its lead-in, at most the last 8 s.
        self._recent = RecentAudio(rate, SMART_TURN_MAX_SECS * 1000)
        self._turn_from = 0  # the input sample where the open turn's speech began
        self._last_turn: tuple[int, int] | None = None  # the last turn's first and end sample
        self._silence_started: float | None = None
        self._speech_started_ms = 0.0  # where the open turn's speech began
        self._barge_in_from: float | None = None  # voice over the bot, not yet a barge-in
        self._overlap_asked_at: float | None = None  # when recognition was asked its words
        self._overlap_words: str | None = None  # its answer
        # Smart Turn's verdict on the audio at the VAD's pause, on a thread of the call's own.
        self._judge = ThreadPoolExecutor(max_workers=1, thread_name_prefix="smart-turn")
        self._verdict: asyncio.Future | None = None
        self._decision: asyncio.Task | None = None
        self._fallback_timer: asyncio.Task | None = None
        self._fallback_at_ms: float | None = None
        self._policy = EndOfTurnPolicy.from_settings(settings)
        self._rejudge_at: list[float] = []  # call times of the judgements still to come
        self._words_heard = False
        self._pause_text = ""
        self._pause_goes_on: float | None = None  # recognition's comma where it closed them
        self._pause_text_ready = asyncio.Event()
        self._wait_for_words = words_judged and settings.words_unfinished_below is not None
        self._words_end: float | None = None  # the LLM's verdict on the pause transcript
        self._words_ready = asyncio.Event()
        self._onset = None if settings.hold_onset_db is None else SoundOnset(settings.hold_onset_db)
        self._lull = None if settings.lull_pass_ms is None else SoundOnset(LULL_MARGIN_DB)
        self._lull_reported = False
        self._heard = 0  # input samples so far: where a lull began, for recognition
        self._holding = False
        self._held_at: float | None = None  # when the hold began (first sound or voiced window)
        self._held_before_answer = False  # the hold began before the answer's first audio
        self._quiet_since: float | None = None  # in a hold: since when the VAD is quiet

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
            if not self._in_turn and self._barge_in_from is None:
                self._last_turn = None  # the caller heard the answer out: next is a new turn
            if self._holding:  # it had nothing left to say: the output must not stay held
                self._holding = False
                await self.push_frame(HoldBotAudioFrame(hold=False))
        elif isinstance(frame, OverlapTranscriptFrame):
            if self._barge_in_from is not None and self._overlap_asked_at is not None:
                self._overlap_words = frame.text
        elif isinstance(frame, PauseTranscriptFrame):
            self._forget_pause_text()  # and the verdict on earlier words
            self._pause_text, self._pause_goes_on = frame.text, frame.goes_on
            self._pause_text_ready.set()
        elif isinstance(frame, EndOfMessageFrame):
            text = self._pause_text.strip()
            if text and frame.text.strip().endswith(text):  # not a verdict on earlier words
                self._words_end = frame.probability
                self._words_ready.set()
        elif isinstance(frame, EndFrame | CancelFrame):
            await self._cancel_decision()
            self._drop_verdict()
            self._judge.shutdown(wait=False, cancel_futures=True)
            await self._vad.cleanup()  # its analysis thread
        elif isinstance(frame, InputAudioRawFrame):
            await self._on_audio(frame.audio)

    @property
    def deciding(self) -> bool:
        """Smart Turn (or the wait for the pause transcript) is judging a stop right now."""
        judging = self._verdict is not None and not self._verdict.done()
        return judging or (self._decision is not None and not self._decision.done())

    async def _on_audio(self, pcm: bytes) -> None:
        self._recent.add(pcm)
        self._heard += len(pcm) // 2
        state = await self._vad.analyze_audio(pcm)
        previous, self._state = self._state, state
        voiced, self._vad.peak_confidence = self._vad.peak_confidence, 0.0
        onset = self._onset is not None and self._onset.update(pcm, self._rate)
        await self._hold_or_release(state, voiced >= self._settings.vad_confidence, onset)
        if self._lull is not None:
            self._lull.update(pcm, self._rate)
            await self._report_lull(state)
        if self._fallback_at_ms is not None and self._clock.now_ms() >= self._fallback_at_ms:
            await self._end_turn("max_silence", self._settings.max_silence_secs)
        if self._rejudge_at and self._in_turn:
            self._maybe_rejudge()
        if self._barge_in_from is not None:
            await self._confirm_barge_in(state)
        if state == previous:
            return
        if state == VADState.SPEAKING and previous != VADState.STOPPING:
            await self._speech_started()
        elif state == VADState.SPEAKING:  # STOPPING -> SPEAKING: only a short dip
            await self._speech_resumed()
        elif state == VADState.STOPPING:
            self._silence_started = self._clock.now_ms()
            await self.push_frame(SpeechPausedFrame(quiet_from=self._quiet_from()))
            if self._smart_turn is not None and self._in_turn:
                self._drop_verdict()
                self._verdict = self._judge_now()
        elif state == VADState.QUIET and previous == VADState.STOPPING:
            await self._speech_stopped()

    async def _hold_or_release(self, state: VADState, voiced: bool, onset: bool) -> None:
        """Hold the bot's audio on a sound or voiced window over it, or before the answer
        has begun (a caller going on after a pause must not hear it start over them);
        release after a spell without voice."""
        if not self._settings.hold_on_speech or self._in_turn:
            return
        now = self._clock.now_ms()
        if (voiced or onset) and (self._bot_speaking or self._answer_due) and not self._holding:
            self._holding, self._held_at, self._quiet_since = True, now, None
            self._held_before_answer = not self._bot_speaking
            await self.push_frame(
                HoldBotAudioFrame(hold=True, before_answer=self._held_before_answer)
            )
        elif self._holding and state == VADState.QUIET and not voiced and not self._judging_overlap:
            self._quiet_since = self._quiet_since or now
            if now - self._quiet_since >= self._settings.hold_release_secs * 1000:
                self._holding = False
                await self.push_frame(HoldBotAudioFrame(hold=False))
        elif self._holding:
            self._quiet_since = None

    @property
    def _judging_overlap(self) -> bool:
        """Recognition was asked what the voice over the bot said and has not answered."""
        return self._overlap_asked_at is not None and self._overlap_words is None

    async def _report_lull(self, state: VADState) -> None:
        """Once per lull: the line went quiet while the VAD still hears a voice in the turn."""
        assert self._lull is not None and self._settings.lull_pass_ms is not None
        quiet = self._lull.quiet_samples
        if quiet == 0:
            self._lull_reported = False
        elif (
            self._in_turn
            and state == VADState.SPEAKING
            and not self._lull_reported
            and quiet * 1000 >= self._settings.lull_pass_ms * self._rate
        ):
            self._lull_reported = True
            await self.push_frame(SpeechLullFrame())

    def _quiet_from(self) -> int | None:
        """Where the line went quiet (in input samples), if it is quiet now."""
        if self._lull is None or self._lull.quiet_samples == 0:
            return None
        return self._heard - self._lull.quiet_samples

    async def _speech_started(self) -> None:
        now = self._clock.now_ms()
        start = round(now - self._settings.vad_start_secs * 1000, 1)
        if self._holding and self._held_at is not None:  # heard before a dip reset the count
            start = min(start, self._held_at)
        await self._cancel_decision()
        if self._in_turn:
            await self._speech_resumed()
            return
        went_on = self._holding and self._held_before_answer  # the caller was first
        if self._bot_speaking and not went_on:
            self._end_overlap()
            self._barge_in_from = start
            await self._confirm_barge_in(VADState.SPEAKING)
            return
        await self._open_turn(start)

    async def _confirm_barge_in(self, state: VADState) -> None:
        """A voice over the bot: a barge-in once it has lasted ``barge_in_secs``, unless its
        words are a backchannel ("mm-hmm", "yeah", "okay"), which only holds the bot's audio
        until the voice ends. Recognition is asked for the words then (or when the voice ends
        sooner); a voice that goes on past ``backchannel_max_secs``, or goes on after the bot
        stopped, is the caller's turn whatever it says."""
        assert self._barge_in_from is not None
        now = self._clock.now_ms()
        lasted = now - self._barge_in_from
        max_secs = self._settings.backchannel_max_secs
        if max_secs is None or not self._settings.hold_on_speech:  # the voice's length alone
            if state == VADState.QUIET:
                self._end_overlap()
            elif not self._bot_speaking or lasted >= self._settings.barge_in_secs * 1000:
                await self._barge_in(state)
            return
        if state != VADState.QUIET and not self._bot_speaking:
            await self._barge_in(state)
            return
        if self._overlap_asked_at is None and (
            state == VADState.QUIET or lasted >= self._settings.barge_in_secs * 1000
        ):
            self._overlap_asked_at = now
            await self.push_frame(OverlapCheckFrame())
        words = self._overlap_words
        if words is not None and not is_backchannel(words):
            await self._barge_in(state)  # "wait", "no, stop", a question: an interruption
        elif state != VADState.QUIET and lasted >= max_secs * 1000:
            await self._barge_in(state)  # too long for an acknowledgement
        elif words is None and self._overlap_asked_at is not None:
            if now - self._overlap_asked_at >= OVERLAP_WORDS_WAIT_SECS * 1000:
                # no words came (no recogniser, or a slow one): the voice's length decides
                if state == VADState.QUIET:
                    self._end_overlap()
                else:
                    await self._barge_in(state)
        elif state == VADState.QUIET and words is not None:
            self._end_overlap()  # a backchannel, over: the hold's release resumes the answer

    def _end_overlap(self) -> None:
        self._barge_in_from = None
        self._overlap_asked_at = None
        self._overlap_words = None

    async def _barge_in(self, state: VADState) -> None:
        """The voice over the bot is the caller's turn: it opens where the voice began; a
        voice already over ("wait.") is judged at once, as if its stop had just passed."""
        assert self._barge_in_from is not None
        start = self._barge_in_from
        self._end_overlap()
        await self._open_turn(start)
        if state == VADState.QUIET:
            await self._speech_stopped()

    async def _open_turn(self, start: float) -> None:
        self._in_turn = True
        self._speech_started_ms = start
        self._turn_from = self._heard - round((self._clock.now_ms() - start) * self._rate / 1000)
        gap = self._settings.continuation_secs
        if self._last_turn is not None and gap is not None:
            first, ended = self._last_turn
            if self._turn_from - ended <= gap * self._rate:
                self._turn_from = first  # it goes on from the last one: Smart Turn hears both
        held_answer = self._holding and self._held_before_answer and not self._bot_speaking
        self._holding = self._answer_due = False  # the interruption below flushes the held audio
        await self.push_frame(TimelineEventFrame(event="speech_start", at_ms=start, exact=False))
        if self._bot_speaking:
            await self.broadcast_interruption()
        await self.broadcast_frame(UserStartedSpeakingFrame)
        if held_answer:
            # The context aggregator drops an answer it asked for at the frame above (its
            # interruption reaches the output first); the release frees the output if none was.
            await self.push_frame(HoldBotAudioFrame(hold=False))

    def _judge_now(self) -> asyncio.Future:
        """Smart Turn's verdict on the audio so far, on the call's own thread. First asked as
        the VAD pauses, not after the stop window: the verdict is ready when the window ends,
        and its CPU time no longer collides with the answer's first tokens (the LLM starts on
        the pause transcript)."""
        lead = round(SMART_TURN_LEAD_SECS * self._rate)
        heard = np.frombuffer(bytes(self._recent.snapshot()), dtype=np.int16)
        audio = heard[-max(1, self._heard - self._turn_from + lead) :]
        return asyncio.get_running_loop().run_in_executor(
            self._judge, self._completion_probability, audio
        )

    def _drop_verdict(self) -> None:
        if self._verdict is not None:
            self._verdict.cancel()  # a verdict not yet started never runs
            self._verdict = None

    async def _speech_resumed(self) -> None:
        self._drop_verdict()
        self._silence_started = None
        self._fallback_at_ms = None
        self._rejudge_at = []
        self._forget_pause_text()
        await self._cancel_decision()
        await self.push_frame(VADUserStartedSpeakingFrame())

    async def _speech_stopped(self) -> None:
        if not self._in_turn:
            return
        stopped_at = self._silence_started or self._clock.now_ms()
        await self.push_frame(TimelineEventFrame(event="speech_end", at_ms=stopped_at, exact=False))
        await self.push_frame(VADUserStoppedSpeakingFrame(stop_secs=self._settings.vad_stop_secs))
        self._decision = self.create_task(self._decide_end_of_turn(stopped_at))

    async def _decide_end_of_turn(self, silence_started_ms: float) -> None:
        with self._clock.busy():  # a compute-paced replay waits for the verdict
            verdict = await self._judge_stop()
        if verdict is not None:
            await self._end_turn(*verdict)
            return
        fallback_secs = self._settings.max_silence_secs
        fallback = silence_started_ms + fallback_secs * 1000
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
            await self._end_turn("max_silence", self._settings.max_silence_secs)

    async def _judge_stop(self) -> tuple[str, float] | None:
        """Which signal ends the turn at the stop window, with its value (None: none yet)."""
        self._words_heard = await self._heard_words()
        if not self._words_heard:
            return None  # a hiss or a click before the caller speaks: wait for the words
        if self._smart_turn is None:
            return None
        # The pause's verdict, and when it does not end the turn alone one on the audio now: a
        # finished sentence can sound less finished 0.1 s into its silence than after the stop
        # window (on the phone line "We must find a new home in the stars." scored 0.02-0.08
        # at the pause, 0.10-0.19 later). A verdict that clears the bar already leaves the
        # cores to recognition and the LLM, which the turn's end waits for next.
        stop = self._policy.stop_secs
        probability = await (self._verdict or self._judge_now())
        if not self._policy.ends(probability, stop, sentence=False):
            probability = max(probability, await self._judge_now())
        if self._policy.ends(probability, stop, sentence=True):  # the words decide: wait briefly
            arrived = await self._pause_text_arrived()
            if arrived and self._wait_for_words and has_words(self._pause_text):
                await self._words_arrived()
        return self._verdict_ends(probability, stop)

    def _maybe_rejudge(self) -> None:
        """Once the silence reaches the next of ``REJUDGE_SECS``, Smart Turn judges again."""
        due = [at for at in self._rejudge_at if at <= self._clock.now_ms()]
        if not due or (self._decision is not None and not self._decision.done()):
            return
        self._rejudge_at = [at for at in self._rejudge_at if at > due[-1]]
        silence_secs = (due[-1] - (self._silence_started or due[-1])) / 1000
        self._decision = self.create_task(self._rejudge(silence_secs))

    @property
    def _words_so_far(self) -> str:
        """Recognition's pause transcript, "" until it has come."""
        return self._pause_text if self._pause_text_ready.is_set() else ""

    async def _rejudge(self, silence_secs: float) -> None:
        verdict = self._verdict_ends(None, silence_secs)  # the words alone: no verdict needed
        if verdict is None:
            with self._clock.busy():
                probability = await self._judge_now()
            verdict = self._verdict_ends(probability, silence_secs)
        if verdict is not None and self._in_turn:
            await self._end_turn(*verdict)

    def _verdict_ends(
        self, probability: float | None, silence_secs: float
    ) -> tuple[str, float] | None:
        """Smart Turn's verdict (``probability``; None: the words alone) against the policy
        after this silence: the reason and value that end the turn, or None."""
        text, words_end, goes_on = self._words_so_far, self._words_end, self._pause_goes_on
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
        if not await self._pause_text_arrived():
            return True
        return has_words(self._pause_text)

    async def _pause_text_arrived(self) -> bool:
        try:
            await asyncio.wait_for(
                self._pause_text_ready.wait(), self._clock.limit(PAUSE_TEXT_WAIT_SECS)
            )
        except TimeoutError:
            return False
        return True

    async def _words_arrived(self) -> None:
        """Wait (live, briefly: a busy engine must not hold the turn) for the LLM's verdict."""
        try:
            await asyncio.wait_for(self._words_ready.wait(), self._clock.limit(WORDS_WAIT_SECS))
        except TimeoutError:
            pass

    def _forget_pause_text(self) -> None:
        """The pause transcript and the LLM's verdict on it no longer hold."""
        self._pause_text, self._pause_goes_on = "", None
        self._pause_text_ready.clear()
        self._words_end = None
        self._words_ready.clear()

    def _completion_probability(self, audio: np.ndarray) -> float:
        assert self._smart_turn is not None
        result = self._smart_turn._predict_endpoint(audio.astype(np.float32) / 32768.0)
        return float(result["probability"])

    def _stop_fallback_timer(self) -> None:
        timer, self._fallback_timer = self._fallback_timer, None
        if timer is not None and timer is not asyncio.current_task():
            timer.cancel()

    async def _end_turn(self, reason: str, value: float) -> None:
        self._stop_fallback_timer()
        self._verdict = None
        words = None if self._words_end is None else round(self._words_end, 4)
        goes_on = None if self._pause_goes_on is None else round(self._pause_goes_on, 4)
        ended = TurnEndReasonFrame(
            reason=reason, value=value, words=words, goes_on=goes_on, text=self._words_so_far
        )
        await self.push_frame(ended)
        self._last_turn = (self._turn_from, self._heard)
        self._in_turn = False
        self._answer_due = True
        self._fallback_at_ms = None
        self._rejudge_at = []
        self._forget_pause_text()
        self._decision = None
        await self.broadcast_frame(UserStoppedSpeakingFrame)

    async def _cancel_decision(self) -> None:
        self._stop_fallback_timer()
        if self._decision is not None:
            await self.cancel_task(self._decision)
            self._decision = None
