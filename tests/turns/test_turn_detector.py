"""The turn detector on real speech, the real Silero VAD and Smart Turn, on an audio clock
so the tests run faster than real time.

Barge-in hold: the bot's audio stops at the caller's first speech window, not once the VAD
has confirmed speech; it resumes when that speech is not confirmed. End of turn: Smart Turn
judges the audio at the VAD's pause, before the stop window has passed."""

from __future__ import annotations

import numpy as np
import pytest
from pipecat.frames.frames import (
    BotStartedSpeakingFrame,
    InputAudioRawFrame,
    InterruptionFrame,
    UserStartedSpeakingFrame,
    UserStoppedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.processors.frame_processor import FrameDirection
from pipecat.tests.utils import run_test

from agent.audio import load_audio, speech_bounds
from agent.clock import CallClock, ComputeClock
from agent.frames import HoldBotAudioFrame, OverlapCheckFrame
from agent.turns.detector import REJUDGE_SECS, TurnDetector
from agent.turns.vad import TurnModels
from tests.support.clips import CORPUS, SAMPLES

pytestmark = pytest.mark.slow

RATE = 16000
CHUNK = 320  # 20 ms, as the transports send it


class AudioClock(CallClock):
    """Milliseconds of audio heard so far."""

    samples = 0

    def now_ms(self) -> float:
        return round(self.samples * 1000 / RATE, 1)


class AudioClockedDetector(TurnDetector):
    """The turn detector on an audio clock: each frame of audio moves it on by its length."""

    async def process_frame(self, frame, direction):
        if isinstance(frame, InputAudioRawFrame):
            self._clock.samples += len(frame.audio) // 2
        await super().process_frame(frame, direction)


def audio_frames(pcm: np.ndarray) -> list[InputAudioRawFrame]:
    """16 kHz samples as the 20 ms frames a transport sends."""
    return [
        InputAudioRawFrame(audio=pcm[i : i + CHUNK].tobytes(), sample_rate=RATE, num_channels=1)
        for i in range(0, len(pcm) - CHUNK + 1, CHUNK)
    ]


# 280 ms of speech: Silero calls 5 windows speech (STARTING), short of vad_start_secs.
@pytest.mark.parametrize(("speech_ms", "confirmed"), [(280, False), (1500, True)])
async def test_speech_over_the_bot_holds_its_audio_at_once(settings, speech_ms, confirmed):
    home = load_audio(SAMPLES / "new_home_in_the_stars.wav", RATE)
    start = speech_bounds(home, RATE)[0] + RATE // 10
    speech = home[start : start + speech_ms * RATE // 1000]
    pcm = np.concatenate([np.zeros(RATE // 2, np.int16), speech, np.zeros(RATE, np.int16)])
    frames = audio_frames(pcm)
    detector = AudioClockedDetector(settings.turn, TurnModels.load(), AudioClock(), rate=RATE)
    down, _ = await run_test(
        detector,
        frames_to_send=[BotStartedSpeakingFrame(), *frames],
    )
    holds = [(i, f.hold) for i, f in enumerate(down) if isinstance(f, HoldBotAudioFrame)]
    opened = [i for i, f in enumerate(down) if isinstance(f, UserStartedSpeakingFrame)]
    if confirmed:
        assert [h for _, h in holds] == [True] and len(opened) == 1
        assert holds[0][0] < opened[0]  # held before the barge-in was confirmed
        assert any(isinstance(f, InterruptionFrame) for f in down)
    else:
        assert [h for _, h in holds] == [True, False] and not opened


class ComputePacedDetector(TurnDetector):
    """The turn detector on a compute-paced clock: each audio frame waits for the work the
    audio before it started (Smart Turn's verdicts, the end-of-turn decision) to finish, so
    a turn's end comes where an infinitely fast machine would decide it."""

    async def process_frame(self, frame, direction):
        if isinstance(frame, InputAudioRawFrame):
            await self._clock.wait_until(self._clock.now_ms() + len(frame.audio) * 500 / RATE)
        await super().process_frame(frame, direction)


@pytest.mark.parametrize("bot_starts", ["in_the_turn", "after_it"])
async def test_the_bot_s_audio_starting_over_an_open_turn_stops_at_once(settings, bot_starts):
    """A greeting whose audio begins after the caller started talking (or an answer that
    raced their next turn) stops: the hold acts only on a voice that starts over the bot,
    so without this it played over the caller to its end. The caller's turn goes on and
    ends as it would have. Audio that starts after the turn ended is the answer: it plays."""
    home = load_audio(SAMPLES / "new_home_in_the_stars.wav", RATE)
    pcm = np.concatenate([np.zeros(RATE // 2, np.int16), home, np.zeros(2 * RATE, np.int16)])
    frames = audio_frames(pcm)
    spoken_from = (RATE // 2 + speech_bounds(home, RATE)[0]) // CHUNK
    at = spoken_from + 25 if bot_starts == "in_the_turn" else len(frames)  # 0.5 s in; after
    detector = ComputePacedDetector(settings.turn, TurnModels.load(), ComputeClock(), rate=RATE)
    down, _ = await run_test(
        detector, frames_to_send=[*frames[:at], BotStartedSpeakingFrame(), *frames[at:]]
    )
    kinds = [type(f) for f in down if not isinstance(f, InputAudioRawFrame)]
    assert kinds.count(UserStartedSpeakingFrame) == kinds.count(UserStoppedSpeakingFrame) == 1
    assert HoldBotAudioFrame not in kinds  # no barge-in to judge: the caller was first
    if bot_starts == "in_the_turn":
        assert kinds.count(InterruptionFrame) == 1
        assert kinds.index(UserStartedSpeakingFrame) < kinds.index(InterruptionFrame)
        assert kinds.index(InterruptionFrame) < kinds.index(UserStoppedSpeakingFrame)
    else:
        assert InterruptionFrame not in kinds


def going_on(speech_ms: int | None = None) -> tuple[int, np.ndarray]:
    """A finished sentence, 2 s of silence (the 1.5 s fallback ends the turn at the latest),
    then the caller's voice again (``speech_ms`` of it; None: to its end) and 2 s more: the
    first sample of that voice, and the audio."""
    home = load_audio(SAMPLES / "new_home_in_the_stars.wav", RATE)
    start, end = speech_bounds(home, RATE)
    gap = np.zeros(2 * RATE, np.int16)
    first = np.concatenate([np.zeros(RATE // 2, np.int16), home[start:end], gap])
    again = home[start + RATE // 10 : end]
    if speech_ms is not None:
        again = again[: speech_ms * RATE // 1000]
    return len(first), np.concatenate([first, again, gap])


def last_index(kinds: list[type], kind: type) -> int:
    return len(kinds) - 1 - kinds[::-1].index(kind)


# After 2 s of silence Silero confirms 200 ms of this voice (VAD states carry over), not 120.
@pytest.mark.parametrize(("speech_ms", "confirmed"), [(120, False), (1500, True)])
async def test_a_caller_going_on_before_the_answer_plays_holds_it(settings, speech_ms, confirmed):
    """Between a turn's end and its answer's first audio (a few hundred ms live), a caller
    who goes on after their pause holds the answer at their first sound: before, the answer
    started over them until the VAD confirmed their voice. Confirmed, their new turn opens
    and then the hold is released (the context aggregator drops the answer it asked for as
    the turn opens, tests/llm/test_turn_continuation.py); not confirmed (a cough), it is
    released once the line is quiet. The detector itself interrupts nothing: a final still
    on its way would be dropped with it."""
    _, pcm = going_on(speech_ms)
    detector = ComputePacedDetector(settings.turn, TurnModels.load(), ComputeClock(), rate=RATE)
    down, _ = await run_test(detector, frames_to_send=audio_frames(pcm))
    kinds = [type(f) for f in down if not isinstance(f, InputAudioRawFrame)]
    holds = [(f.hold, f.before_answer) for f in down if isinstance(f, HoldBotAudioFrame)]
    ended = kinds.index(UserStoppedSpeakingFrame)
    assert kinds.index(HoldBotAudioFrame) > ended  # not in the turn: after its end
    assert InterruptionFrame not in kinds
    assert [hold for hold, _ in holds] == [True, False] and holds[0][1]  # before the answer
    assert kinds.count(UserStartedSpeakingFrame) == (2 if confirmed else 1)
    if confirmed:
        reopened = last_index(kinds, UserStartedSpeakingFrame)
        assert kinds.index(HoldBotAudioFrame) < reopened < last_index(kinds, HoldBotAudioFrame)


async def test_a_caller_who_went_on_before_the_answer_began_is_no_barge_in(settings):
    """The answer's audio began while the caller's first sound held it (the hold crossed the
    pipeline after the output had started): their voice still opens their turn at once and
    stops the answer, instead of being judged as a voice over the bot (which waits for its
    words, and takes a short one for an acknowledgement)."""
    voice_from, pcm = going_on()
    frames = audio_frames(pcm)
    at = voice_from // CHUNK + 3  # the answer's audio begins 60 ms into the caller's voice
    detector = ComputePacedDetector(settings.turn, TurnModels.load(), ComputeClock(), rate=RATE)
    down, _ = await run_test(
        detector, frames_to_send=[*frames[:at], BotStartedSpeakingFrame(), *frames[at:]]
    )
    kinds = [type(f) for f in down if not isinstance(f, InputAudioRawFrame)]
    holds = [(f.hold, f.before_answer) for f in down if isinstance(f, HoldBotAudioFrame)]
    assert holds == [(True, True)]  # the interruption, not a release, ends this hold
    assert OverlapCheckFrame not in kinds
    assert kinds.count(UserStartedSpeakingFrame) == 2
    reopened = last_index(kinds, UserStartedSpeakingFrame)
    assert kinds.index(HoldBotAudioFrame) < kinds.index(InterruptionFrame) < reopened


class HoldTimedDetector(AudioClockedDetector):
    """Notes the audio time of each hold it sends."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.held_at_ms: list[float] = []

    async def push_frame(self, frame, direction=FrameDirection.DOWNSTREAM):
        if isinstance(frame, HoldBotAudioFrame) and frame.hold:
            self.held_at_ms.append(self._clock.now_ms())
        await super().push_frame(frame, direction)


@pytest.mark.parametrize("onset_db", [None, 10.0])
async def test_the_hold_comes_at_the_first_sound_not_at_silero_s_voice(settings, onset_db):
    home = load_audio(SAMPLES / "new_home_in_the_stars.wav", RATE)
    start = speech_bounds(home, RATE)[0]  # a click, 140 ms before the voice
    pcm = np.concatenate([np.zeros(RATE // 2, np.int16), home[start:]])
    frames = audio_frames(pcm)
    turn = settings.turn.model_copy(update={"hold_onset_db": onset_db})
    detector = HoldTimedDetector(turn, TurnModels.load(), AudioClock(), rate=RATE)
    await run_test(detector, frames_to_send=[BotStartedSpeakingFrame(), *frames])
    after_start = detector.held_at_ms[0] - 500
    if onset_db is None:
        assert after_start >= 150  # Silero: once the voice itself has begun
    else:
        assert after_start <= 40  # the first frame or two of the caller's sound


class VerdictTimedDetector(AudioClockedDetector):
    """Notes how much audio Smart Turn judged, and when the stop window ended."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.judged_ms: list[float] = []
        self.window_passed_ms: list[float] = []
        assert self._smart_turn is not None
        probability = self._smart_turn.probability

        def noting(audio: np.ndarray) -> float:
            self.judged_ms.append(len(audio) * 1000 / RATE)
            return probability(audio)

        self._smart_turn.probability = noting  # type: ignore[method-assign]

    async def push_frame(self, frame, direction=FrameDirection.DOWNSTREAM):
        if isinstance(frame, VADUserStoppedSpeakingFrame):
            self.window_passed_ms.append(self._clock.now_ms())
        await super().push_frame(frame, direction)


async def test_smart_turn_judges_the_audio_at_the_vad_pause_not_after_the_stop_window(settings):
    home = load_audio(SAMPLES / "new_home_in_the_stars.wav", RATE)  # 3.6 s: all of it judged
    pcm = np.concatenate([home, np.zeros(RATE, np.int16)])
    detector = VerdictTimedDetector(settings.turn, TurnModels.load(), AudioClock(), rate=RATE)
    await run_test(detector, frames_to_send=audio_frames(pcm))
    assert len(detector.window_passed_ms) == 1
    stop_window_ms = settings.turn.vad_stop_secs * 1000
    assert detector.judged_ms[0] <= detector.window_passed_ms[0] - stop_window_ms + 40
    # a verdict of "not yet" at the pause is asked again once the window has passed, and then
    # at most once per silence of REJUDGE_SECS (how much audio each one hears depends on how
    # far the feeder got while it ran: this test feeds faster than real time)
    assert all(ms >= detector.window_passed_ms[0] - 40 for ms in detector.judged_ms[1:])
    assert len(detector.judged_ms) <= 2 + len(REJUDGE_SECS)


class TextWaitCounter(AudioClockedDetector):
    """Counts the stops at which it waited for recognition's pause transcript."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.waits = 0
        arrived = self._words.text_arrived

        async def counting() -> bool:
            self.waits += 1
            return await arrived()

        self._words.text_arrived = counting  # type: ignore[method-assign]


@pytest.mark.parametrize(("speech_ms", "waits"), [(500, True), (None, False)])
async def test_only_a_short_sound_waits_for_the_transcript_to_tell_noise_from_words(
    settings, speech_ms, waits
):
    """A sound under a second may be a click or a breath, so whether it holds a word decides;
    a longer turn is speech and its end is not delayed by the transcript (no recogniser here:
    the transcript never comes)."""
    home = load_audio(SAMPLES / "new_home_in_the_stars.wav", RATE)
    start, end = speech_bounds(home, RATE)
    speech = home[start : start + speech_ms * RATE // 1000] if speech_ms else home[start:end]
    pcm = np.concatenate([np.zeros(RATE // 2, np.int16), speech, np.zeros(RATE, np.int16)])
    # no text credit: only Smart Turn's own verdict ends the turn, so nothing asks for the text
    turn = settings.turn.model_copy(update={"text_credit": 0.0})
    detector = TextWaitCounter(turn, TurnModels.load(), AudioClock(), rate=RATE)
    await run_test(detector, frames_to_send=audio_frames(pcm))
    assert (detector.waits > 0) is waits


QUIET_DIGITS = sorted((CORPUS / "short").glob("audiomnist_*.wav"))


@pytest.mark.skipif(not QUIET_DIGITS, reason="needs ../shared/corpus/short (the corpus)")
@pytest.mark.parametrize("clip", QUIET_DIGITS, ids=lambda p: p.stem)
async def test_a_quiet_caller_s_word_opens_and_ends_a_turn(settings, clip):
    """A caller far from the microphone (speech peaking near -30 dBFS, Silero sure it is a
    voice) is heard: the loudness floor keeps out only what is quieter still."""
    word = load_audio(clip, RATE)
    pcm = np.concatenate([np.zeros(RATE // 2, np.int16), word, np.zeros(RATE, np.int16)])
    detector = AudioClockedDetector(settings.turn, TurnModels.load(), AudioClock(), rate=RATE)
    down, _ = await run_test(detector, frames_to_send=audio_frames(pcm))
    assert sum(isinstance(f, UserStartedSpeakingFrame) for f in down) == 1
    assert sum(isinstance(f, VADUserStoppedSpeakingFrame) for f in down) == 1


@pytest.mark.parametrize("level_dbfs", [-45, -25])
async def test_steady_noise_as_loud_as_a_quiet_voice_opens_no_turn(settings, level_dbfs):
    """Loudness alone never opens a turn: Silero's confidence has to call it a voice."""
    rng = np.random.default_rng(0)
    noise = rng.normal(0, 32768 * 10 ** (level_dbfs / 20), 3 * RATE).clip(-32768, 32767)
    detector = AudioClockedDetector(settings.turn, TurnModels.load(), AudioClock(), rate=RATE)
    down, _ = await run_test(detector, frames_to_send=audio_frames(noise.astype(np.int16)))
    assert not any(isinstance(f, UserStartedSpeakingFrame) for f in down)
