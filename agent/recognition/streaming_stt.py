"""Streaming speech recognition on faster-whisper / CTranslate2.

While the caller speaks, a pass runs over the growing utterance every ``interim_interval_ms``
of new speech. At most one interim pass is in flight: a pass that falls due while another
runs is not queued; the next one starts when the running one ends, on the newest audio, so
the cadence is the interval or the pass time, whichever is longer, and a slow pass never
builds a backlog. Each pass gives an ``InterimTranscriptionFrame`` whose confirmed prefix is
the words two consecutive passes agree on (LocalAgreement-2). When the line goes quiet while
the VAD still hears a voice (a lull), a pass starts at once, on a second worker thread if an
interim still runs (CTranslate2 cannot stop a pass; that one read the caller still speaking,
is stale and is not sent): the turn's end waits for the lull's pass, not behind the interim.
When the VAD hears silence the final pass starts (speculatively; its text also goes upstream
to the turn detector), unless the latest pass began after the line went quiet: that one
heard the whole turn already and is kept. At ``turn_end`` the result is emitted if no speech came
after it, otherwise a fresh pass runs. Audio before the VAD start is kept (pre-roll) so no
first word is lost. Long turns are committed and trimmed by ``Utterance`` (see utterance.py).
A voice over the bot (``HoldBotAudioFrame``) is kept from the hold on: asked
(``OverlapCheckFrame``), one pass over it tells the turn detector its words, and a barge-in's
turn starts with it. A turn that starts within ``context_gap_secs`` of the previous one's end,
with no answer heard to its end in between, is the caller going on after a pause: its passes
read the previous turn's audio and words first (``Context``), as one pass over both would,
and give only the new words. The pause's and final passes hear those words again instead of
forcing them: where they now differ, a ``TranscriptRevisionFrame`` replaces them. A turn that
goes on from one that went on itself reads all of them (at most ``CONTEXT_MAX_SECS``), so a
middle part is never heard again without the part before it.

A decoder failure never ends the call: it is reported once per turn as a
``StageErrorFrame(stage="stt")``, interims skip it, and a failed final pass finishes the turn
with the last interim text (empty if there was none, so no answer is made).
"""

from __future__ import annotations

import asyncio
import functools
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

import numpy as np
from loguru import logger
from pipecat.frames.frames import (
    BotStoppedSpeakingFrame,
    Frame,
    InputAudioRawFrame,
    InterimTranscriptionFrame,
    TranscriptionFrame,
    UserStartedSpeakingFrame,
    UserStoppedSpeakingFrame,
    VADUserStartedSpeakingFrame,
)
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor

from agent.audio import RecentAudio
from agent.clock import CallClock
from agent.errors import error_line
from agent.frames import (
    HoldBotAudioFrame,
    OverlapCheckFrame,
    OverlapTranscriptFrame,
    PauseTranscriptFrame,
    SpeculativeTranscriptFrame,
    SpeechLullFrame,
    SpeechPausedFrame,
    StageErrorFrame,
    TimelineEventFrame,
    TranscriptRevisionFrame,
)
from agent.recognition.numbers import written_digits
from agent.recognition.utterance import NOISE_MAX_SECS, Snapshot, Utterance, has_words
from agent.recognition.whisper_decoder import (
    PASSES_AT_ONCE,
    RATE,
    Context,
    Pass,
    WhisperDecoder,
    Word,
)
from agent.settings import ASRSettings
from agent.timing import cpu

OVERLAP_MAX_SECS = 10  # a voice over the bot kept this long at most (a barge-in opens sooner)
# Whisper's own rule for a window of no speech (faster-whisper's no_speech_threshold and
# log_prob_threshold): it calls it so, and is unsure of the words it wrote anyway. The
# probability alone dropped single digits on the phone line (docs/decisions.md).
NO_SPEECH_PROB = 0.6
NO_SPEECH_LOGPROB = -1.0
CONTEXT_MAX_SECS = 8.0  # a longer previous turn is not read again (each pass would pay for it)
BEAM_SIZE = 5  # faster-whisper's default, for a short turn's end (ASRSettings.short_turn_secs)


def heard_words(result: Pass, text: str, short: bool) -> str:
    """A pass's words (``text``: as the turn reads them), or "" when it heard noise: no
    word in it, or a ``short`` sound Whisper itself calls no speech. Only a short sound can
    be noise: a pass over real speech may come back empty."""
    noise = result.no_speech_prob >= NO_SPEECH_PROB and result.avg_logprob < NO_SPEECH_LOGPROB
    if not has_words(text) or (short and noise):
        return ""
    return text.strip()


class _RunningPass:
    """A pass over a snapshot: where its audio ends in the call's input, when it was ready."""

    def __init__(
        self, snap: Snapshot, future: asyncio.Future, clock: CallClock, position: int
    ) -> None:
        self.snap = snap
        self.future = future
        self.position = position  # input samples received when the snapshot was taken
        self.ready_ms: float | None = None
        future.add_done_callback(lambda _: setattr(self, "ready_ms", clock.now_ms()))


class _PreviousTurn:
    """The caller's last turns as the next one may read them: their audio (since the last
    trim), each turn's words as told downstream with where its audio starts in it, and
    where in the call's input the last one ended."""

    def __init__(self, audio: np.ndarray, parts: list[tuple[str, int]], ended_at: int) -> None:
        self.audio = audio  # float32
        self.parts = parts
        self.ended_at = ended_at

    @property
    def text(self) -> str:
        return " ".join(text for text, _ in self.parts if text)

    def heard_again(self, words: list[Word]) -> list[tuple[str, str]] | None:
        """(words told, words now) for each turn, the words timed in this audio; None when
        every turn's words are as told, or a turn's would all go (its turn record would be
        one of noise)."""
        starts = [at / RATE for _, at in self.parts[1:]] + [float("inf")]
        now: list[list[str]] = [[] for _ in self.parts]
        part = 0
        for word in words:
            while word.middle >= starts[part]:
                part += 1
            now[part].append(word.text)
        pairs = [
            (told, written_digits(" ".join(w)))
            for (told, _), w in zip(self.parts, now, strict=True)
        ]
        if not all(now) or all(told == heard for told, heard in pairs):
            return None
        self.parts = [(heard, at) for (_, at), (_, heard) in zip(self.parts, pairs, strict=True)]
        return pairs

    def then(self, audio: np.ndarray, text: str, starts_at: int, ended_at: int) -> _PreviousTurn:
        """These turns and the one after them (its audio from ``starts_at``, input samples);
        that one alone when all would be longer than ``CONTEXT_MAX_SECS``."""
        before = self._up_to(starts_at)
        if len(before) + len(audio) > CONTEXT_MAX_SECS * RATE:
            return _PreviousTurn(audio, [(text, 0)], ended_at)
        joined = np.concatenate([before, audio])
        return _PreviousTurn(joined, [*self.parts, (text, len(before))], ended_at)

    def _up_to(self, starts_at: int) -> np.ndarray:
        """This turn's audio, then silence until ``starts_at`` (input samples), where the
        next turn's audio begins; cut there if that audio reaches back into this turn. What
        lay between is silence to the decoder (it may be the bot's echo)."""
        gap = starts_at - self.ended_at
        if gap >= 0:
            return np.concatenate([self.audio, np.zeros(gap, np.float32)])
        return self.audio[:gap]

    def context(self, lead_starts_at: int, now: int, gap_secs: float) -> Context | None:
        """The context of a turn whose audio starts at ``lead_starts_at``, opened at
        ``now``: None when it opened more than ``gap_secs`` after this turn ended."""
        if now - self.ended_at > gap_secs * RATE or len(self.audio) > CONTEXT_MAX_SECS * RATE:
            return None
        audio = self._up_to(lead_starts_at)
        return Context(self.text, audio) if len(audio) else None

    def then_no_words(self, audio: np.ndarray, starts_at: int, ended_at: int) -> _PreviousTurn:
        """These turns, followed by one in which recognition heard no word: a word too short
        to be told from a noise alone ("peas" after "six spoons of fresh snow") stays in the
        audio the next turn reads, which may hear it there (as the last turn's)."""
        return _PreviousTurn(np.concatenate([self._up_to(starts_at), audio]), self.parts, ended_at)


class StreamingWhisperSTT(FrameProcessor):
    """Interim transcripts while the caller speaks; the final one right at the end of turn."""

    def __init__(
        self, decoder: WhisperDecoder, settings: ASRSettings, clock: CallClock, *, rate: int
    ) -> None:
        super().__init__()
        if rate != RATE:
            raise ValueError(f"recognition runs at {RATE} Hz; the pipeline gives {rate} Hz")
        self._decoder = decoder
        self._settings = settings
        self._clock = clock
        # A lull's or pause's pass starts at once beside a stale interim still running.
        self._executor = ThreadPoolExecutor(
            max_workers=PASSES_AT_ONCE, thread_name_prefix="whisper"
        )
        self._pre_roll = RecentAudio(RATE, settings.pre_roll_ms)
        self._utt: Utterance | None = None
        self._since_pass = 0
        self._running = 0  # interim passes in flight (a lull's included)
        self._interim = ""
        self._failed = False
        self._received = 0  # input samples so far (the turn detector counts the same)
        self._last_pass: _RunningPass | None = None
        self._speculation: _RunningPass | None = None  # the pause's pass; dropped on speech
        self._quiet_pass_due = False  # the next pass is the lull's
        self._heard_only_noise = False  # the latest pause transcript of the turn had no word
        self._overlap: bytearray | None = None  # a voice over the bot: its audio so far
        # the last turns with words (unchanged while a turn is open: what it goes on from)
        self._previous: _PreviousTurn | None = None
        self._turn_starts_at = 0  # where the current turn's audio starts in the input

    # -- frames -----------------------------------------------------------------------------

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        await self.push_frame(frame, direction)
        if direction != FrameDirection.DOWNSTREAM:
            heard_out = self._utt is None and self._overlap is None
            if isinstance(frame, BotStoppedSpeakingFrame) and heard_out:
                self._previous = None  # the caller heard the answer out: a new turn
            return
        if isinstance(frame, InputAudioRawFrame):
            self._on_audio(frame.audio)
        elif isinstance(frame, HoldBotAudioFrame):
            # A voice over the bot: keep its audio from here (with the pre-roll before it), for
            # the question whether it is a backchannel, and as the start of a barge-in's turn.
            # A hold before the answer began is no voice over the bot: the turn it may open
            # goes on from the caller's last one, and starts where any turn does (a lead from
            # the hold would reach back into the last one's words).
            over_bot = frame.hold and not frame.before_answer
            self._overlap = bytearray(self._pre_roll.snapshot()) if over_bot else None
        elif isinstance(frame, OverlapCheckFrame):
            self.create_task(self._report_overlap())
        elif isinstance(frame, UserStartedSpeakingFrame):
            self._start_turn()
        elif isinstance(frame, VADUserStartedSpeakingFrame):
            self._speculation = None
            if self._heard_only_noise and self._utt is not None:
                # What came before the pause held no word (a hiss, a click, a breath): the
                # turn starts again here, so no pass reads it into the caller's words.
                self._start_turn()
        elif isinstance(frame, SpeechLullFrame) and self._utt is not None:
            self._since_pass = max(self._since_pass, self._interval_samples)  # due now
            self._quiet_pass_due = True
            self._maybe_start_interim(beside_one=True)
        elif isinstance(frame, SpeechPausedFrame) and self._utt is not None:
            last = self._last_pass
            a_word_or_two = self._a_word_or_two(self._utt)
            heard_it_all = (
                not a_word_or_two
                and frame.quiet_from is not None
                and last is not None
                and last.position >= frame.quiet_from
                and last.snap.generation == self._utt.generation
            )
            self._speculation = (
                last
                if heard_it_all
                else self._start_pass(
                    self._utt, speech_ended=True, careful=a_word_or_two, kind="stt_pause"
                )
            )
            self.create_task(self._report_pause_transcript(self._speculation))
        elif isinstance(frame, UserStoppedSpeakingFrame) and self._utt is not None:
            await self._finish_turn()

    def _start_turn(self) -> None:
        lead = self._overlap if self._overlap is not None else self._pre_roll.snapshot()
        self._overlap = None
        context = None
        gap_secs = self._settings.context_gap_secs
        self._turn_starts_at = self._received - len(lead) // 2
        if self._previous is not None and gap_secs is not None:
            context = self._previous.context(self._turn_starts_at, self._received, gap_secs)
        self._utt = Utterance(bytes(lead), context, self._short_secs)
        self._since_pass = 0
        self._interim = ""
        self._failed = False
        self._last_pass = None
        self._speculation = None
        self._quiet_pass_due = False
        self._heard_only_noise = False

    @property
    def _short_secs(self) -> float:
        """A turn this short may be a noise (see ``heard_words``)."""
        return self._pre_roll_secs + NOISE_MAX_SECS

    @property
    def _pre_roll_secs(self) -> float:
        return self._settings.pre_roll_ms / 1000

    def _a_word_or_two(self, utt: Utterance) -> bool:
        """A word or two: no words around it to guess a clipped ending or a greedy slip from,
        so its end is read with the whole tail the VAD's pause leaves, and with beam search
        (cheap on a few tokens)."""
        most = self._settings.short_turn_secs
        return most is not None and utt.secs <= self._pre_roll_secs + most

    @property
    def _interval_samples(self) -> int:
        return self._settings.interim_interval_ms * RATE // 1000

    def _on_audio(self, pcm: bytes) -> None:
        self._received += len(pcm) // 2
        self._pre_roll.add(pcm)
        if self._overlap is not None and len(self._overlap) < OVERLAP_MAX_SECS * RATE * 2:
            self._overlap += pcm
        if self._utt is None:
            return
        self._utt.add(pcm)
        self._since_pass += len(pcm) // 2
        self._maybe_start_interim()

    def _maybe_start_interim(self, beside_one: bool = False) -> None:
        """Start a pass if one is due and none runs (a due pass waits for the running one);
        ``beside_one``: the lull's pass, which starts beside a running one (that one read
        the caller still speaking: stale, and it cannot be stopped)."""
        due = self._since_pass >= self._interval_samples
        free = self._running == 0 or (beside_one and self._running < PASSES_AT_ONCE)
        if due and free and self._speculation is None and self._utt is not None:
            self._since_pass = 0
            self._running += 1
            ended, self._quiet_pass_due = self._quiet_pass_due, False
            run = self._start_pass(self._utt, speech_ended=ended, kind="stt_interim")
            self.create_task(self._interim_pass(self._utt, run))

    # -- passes -----------------------------------------------------------------------------

    def _start_pass(
        self, utt: Utterance, *, speech_ended: bool, kind: str, careful: bool = False
    ) -> _RunningPass:
        snap = utt.snapshot()
        running = self._run_pass(snap, speech_ended=speech_ended, kind=kind, careful=careful)
        self._last_pass = _RunningPass(snap, running, self._clock, self._received)
        return self._last_pass

    def _run_pass(
        self, snap: Snapshot, *, speech_ended: bool, kind: str, careful: bool = False
    ) -> asyncio.Future:
        """A pass on the worker thread. Over audio that ends in a lull or pause it expects
        the previous pass's length (Whisper then closes the text and starts over, where that
        limit stops it); mid-speech Whisper loops inside the text, which the limit would cut
        (decoded again in full: slower). ``careful``: beam search, for a short turn's end;
        ``kind``: what the pass is for, in a CPU profile (``agent.timing.cpu``)."""
        expect = snap.expect_tokens if speech_ended else None
        transcribe = functools.partial(
            self._decoder.transcribe,
            snap.audio,
            snap.want_words,
            expect,
            context=snap.context,
            beam_size=BEAM_SIZE if careful else 1,
            hear_context=speech_ended,
            goes_on=speech_ended,
        )
        loop = asyncio.get_running_loop()
        return loop.run_in_executor(self._executor, cpu.marked(kind, "whisper", transcribe))

    async def _report_failure(self, exc: BaseException, what: str) -> None:
        logger.warning(f"{self}: {what} pass failed: {exc!r}")
        if not self._failed:  # once per turn: one broken model fails every pass
            self._failed = True
            await self.push_frame(StageErrorFrame(stage="stt", error=error_line(exc)))

    async def _interim_pass(self, utt: Utterance, run: _RunningPass) -> None:
        try:
            snap = run.snap
            try:
                result: Pass = await run.future
            except Exception as exc:
                if utt is self._utt:
                    await self._report_failure(exc, "interim")
                return
            if run is self._speculation:  # kept as the pause's pass: a commit would void it
                return
            if run is not self._last_pass:
                return  # a later pass (a lull's, the pause's) reads more: this one is stale
            interim = utt.update(snap, result)
            if utt is not self._utt or interim is None or not interim.text:
                return
            self._interim = written_digits(interim.text)
            if self._quiet_pass_due or self._speculation is not None:
                # A lull or the VAD's pause came while this pass ran: the pass over the whole
                # turn starts now. This interim is stale, and the LLM's prefill of it would
                # take the cores from that pass (seen: a 60 ms pass took 270).
                return
            await self.push_frame(
                InterimTranscriptionFrame(
                    text=self._interim,
                    user_id="caller",
                    timestamp=_iso_now(),
                    result={"confirmed": written_digits(interim.confirmed)},
                )
            )
        finally:
            self._running -= 1
        self._maybe_start_interim()

    async def _report_pause_transcript(self, spec: _RunningPass) -> None:
        try:
            result: Pass = await spec.future
        except Exception:
            return  # reported when the final pass is awaited
        if spec is self._speculation and self._utt is not None:
            # Whisper's own writing, as turn-taking has always read it: written as digits,
            # "71512." read as a finished message where "7, 1, 5, 1, 2." was not (the final
            # then differs from it, and the speculative answer is made again)
            text = self._heard(self._utt, result)
            self._heard_only_noise = not text
            pause = PauseTranscriptFrame(text=text, goes_on=result.goes_on)
            await self.push_frame(pause, FrameDirection.UPSTREAM)
            if text:
                await self._revise_context(result)
                await self.push_frame(SpeculativeTranscriptFrame(text=text))  # the LLM may start

    async def _report_overlap(self) -> None:
        """The words of the voice over the bot, upstream to the turn detector ("" for none,
        or when the pass fails: the detector then goes by the voice's length alone)."""
        audio = _floats(bytes(self._overlap or b""))
        text = ""
        if len(audio):
            loop = asyncio.get_running_loop()
            try:
                result: Pass = await loop.run_in_executor(
                    self._executor,
                    cpu.marked("stt_overlap", "whisper", self._decoder.transcribe),
                    audio,
                )
                # the overlap is heard at most a barge-in window long: always a short sound
                text = heard_words(result, result.text, short=True)
            except Exception as exc:
                logger.warning(f"{self}: overlap pass failed: {exc!r}")
        await self.push_frame(OverlapTranscriptFrame(text=text), FrameDirection.UPSTREAM)

    def _heard(self, utt: Utterance, result: Pass) -> str:
        """The turn's text, or nothing when the pass heard noise (``heard_words``)."""
        return heard_words(result, utt.text(result), utt.secs <= self._short_secs)

    async def _revise_context(self, result: Pass) -> None:
        """The turns this one goes on from (the pass read them), where the pass heard their
        words otherwise."""
        if self._previous is not None and result.context_words is not None:
            if (turns := self._previous.heard_again(result.context_words)) is not None:
                await self.push_frame(TranscriptRevisionFrame(turns=turns))

    async def _final_pass(self, utt: Utterance) -> tuple[str, float]:
        """The turn's final text and when it was ready (a failed pass: the last interim)."""
        spec, self._speculation = self._speculation, None
        try:
            if spec is not None and spec.snap.generation == utt.generation:
                # no speech since the pause and no trim: the speculative pass is the final one
                result = await spec.future
                ready_ms = spec.ready_ms or self._clock.now_ms()
            else:
                careful = self._a_word_or_two(utt)
                result = await self._run_pass(
                    utt.snapshot(), speech_ended=True, kind="stt_final", careful=careful
                )
                ready_ms = self._clock.now_ms()
        except Exception as exc:
            await self._report_failure(exc, "final")
            return self._interim, self._clock.now_ms()
        text = self._heard(utt, result)
        if text:
            await self._revise_context(result)
        return text, ready_ms

    async def _finish_turn(self) -> None:
        utt, self._utt = self._utt, None
        assert utt is not None
        text, ready_ms = await self._final_pass(utt)  # noise is not a turn to answer: ""
        logger.debug(f"{self}: final over {utt.secs:.2f} s: {text!r}")
        own, audio = written_digits(utt.own_words(text)), _floats(utt.pcm)
        text = written_digits(text)
        before = self._previous if utt.has_context else None  # what this turn went on from
        if own and before is not None:
            self._previous = before.then(audio, own, self._turn_starts_at, self._received)
        elif own:
            self._previous = _PreviousTurn(audio, [(own, 0)], self._received)
        elif before is not None:
            self._previous = before.then_no_words(audio, self._turn_starts_at, self._received)
        else:
            self._previous = None
        await self.push_frame(TimelineEventFrame(event="stt_final", at_ms=ready_ms))
        await self.push_frame(
            TranscriptionFrame(
                text=text.strip(), user_id="caller", timestamp=_iso_now(), finalized=True
            )
        )

    async def cleanup(self) -> None:
        await super().cleanup()
        self._executor.shutdown(wait=False, cancel_futures=True)


def _floats(pcm: bytes) -> np.ndarray:
    return np.frombuffer(pcm, dtype=np.int16).astype(np.float32) / 32768.0


def _iso_now() -> str:
    return datetime.now(UTC).isoformat()
