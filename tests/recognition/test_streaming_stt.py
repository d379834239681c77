"""Streaming recognition on real speech. What is heard and when a turn ends is asserted at
compute pace (the same on any machine); races between passes and lulls at real-time pace."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest
from pipecat.frames.frames import TranscriptionFrame
from pipecat.pipeline.pipeline import Pipeline
from pipecat.processors.frame_processor import FrameProcessor

from agent import model_store
from agent.audio import load_audio, speech_bounds
from agent.clock import CallClock, ComputeClock
from agent.evaluation.transcribe import (
    TranscriptCollector,
    transcribe_once,
    transcribe_stream,
)
from agent.pipeline import run_pipeline
from agent.recognition.streaming_stt import StreamingWhisperSTT
from agent.recognition.utterance import agreed_prefix, drop_overlap
from agent.recognition.whisper_decoder import RATE, WhisperDecoder, hallucination_cut
from agent.timing.call_recorder import CallRecorder
from agent.transports.replay import ReplayInput, ReplayTurn
from agent.turns.detector import TurnDetector
from agent.turns.vad import TurnModels
from tests.support.clips import CORPUS, SAMPLES
from tests.support.transcripts import normalise, wer

# Speech Commands words, as a turn each. Without the short-turn rule "no" is read greedily
# as "Now.", and "eight" by the lull's pass, which stops before its soft "t", as "Hey".
ONE_WORD_TURNS = {
    "sc_no_37e8db82_nohash_1.wav": {"no"},
    "sc_eight_742d6431_nohash_3.wav": {"eight", "8"},
}


@pytest.fixture(scope="module")
def decoder(settings) -> WhisperDecoder:
    path = model_store.resolve(settings.asr.model, "asr", settings.models_dir)
    return WhisperDecoder(path, compute_type="int8", threads=2, language="en")


def stream(decoder, settings, name: str, samples: np.ndarray):
    """One clip through turn detection and recognition at compute pace."""
    turn = ReplayTurn(name, samples)
    return asyncio.run(transcribe_stream(decoder, turn, settings, ComputeClock()))


def speech_only(name: str) -> np.ndarray:
    samples = load_audio(SAMPLES / name, RATE)
    start, end = speech_bounds(samples, RATE)
    return samples[start:end]


def test_interims_come_while_speaking_and_no_word_is_lost_at_a_pause(decoder, settings, manifest):
    """jfk_part2 pauses 1.0 s after "ask not"; Smart Turn hears that pause as an end (0.8
    after 0.45 s of silence) and the two words cannot say otherwise, so the turn may end
    there (a live call then joins the caller's next words to it): every word is still heard
    once, in the finals together."""
    events = stream(decoder, settings, "jfk_part2", load_audio(SAMPLES / "jfk_part2.wav", RATE))
    finals = [e for e in events if e.kind == "final"]
    interims = [e for e in events if e.kind == "interim"]
    heard = " ".join(e.text for e in finals)
    assert wer(manifest["jfk_part2.wav"]["text"], heard) <= 0.15, heard
    turn_end = [e.at_ms for e in events if e.kind == "turn_end"][-1]
    assert len([e for e in interims if e.at_ms < turn_end]) >= 5
    # interims grow towards the final text and carry a confirmed prefix
    assert any(e.confirmed for e in interims)
    assert all(normalise(e.confirmed) in normalise(e.text) for e in interims)


@pytest.mark.skipif(not (CORPUS / "short").exists(), reason="needs ../shared/corpus")
@pytest.mark.parametrize("name", ONE_WORD_TURNS)
def test_a_one_word_turn_s_end_reads_its_whole_tail_with_beam_search(decoder, settings, name):
    clip = load_audio(CORPUS / "short" / name, RATE)
    heard = {}
    for short_turn_secs in (settings.asr.short_turn_secs, None):
        asr = settings.asr.model_copy(update={"short_turn_secs": short_turn_secs})
        events = stream(decoder, settings.model_copy(update={"asr": asr}), name, clip)
        heard[short_turn_secs] = normalise(" ".join(e.text for e in events if e.kind == "final"))
    assert heard[settings.asr.short_turn_secs] in ONE_WORD_TURNS[name], heard
    assert heard[None] not in ONE_WORD_TURNS[name], "heard right without the rule: tests nothing"


class TimedDecoder:
    """The real decoder, noting on the call clock when each pass starts."""

    def __init__(self, decoder: WhisperDecoder, clock: CallClock) -> None:
        self.decoder, self.clock, self.starts = decoder, clock, []

    def transcribe(self, audio: np.ndarray, *args, **kwargs):
        self.starts.append(self.clock.now_ms())
        return self.decoder.transcribe(audio, *args, **kwargs)


def timed_turn(decoder, settings, name: str):
    """One clip through the turn detector and recognition at compute pace: its events and
    pass starts."""
    clock = ComputeClock()
    timed = TimedDecoder(decoder, clock)
    turn = ReplayTurn(name, load_audio(SAMPLES / name, RATE))
    events = asyncio.run(transcribe_stream(timed, turn, settings, clock))
    return events, timed.starts


def test_the_pass_run_in_the_lull_before_the_vad_pause_is_the_final_one(
    decoder, settings, manifest
):
    # ldc93s1: the line is quiet 40 ms before the last word's end by the clip's energy rule,
    # Silero pauses 160 ms after it. No interims, so the worker is free at the lull.
    asr = settings.asr.model_copy(update={"interim_interval_ms": 60_000})
    texts = {}
    for lull_ms in (60, None):
        turn = settings.turn.model_copy(update={"lull_pass_ms": lull_ms})
        events, starts = timed_turn(
            decoder, settings.model_copy(update={"turn": turn, "asr": asr}), "ldc93s1.wav"
        )
        last_pause = [e.at_ms for e in events if e.kind == "pause"][-1]
        finals = [e.text for e in events if e.kind == "final"]
        assert len(finals) == 1, finals
        texts[lull_ms] = finals[0]
        lulls = [e.at_ms for e in events if e.kind == "lull"]
        # (recognition starts its pass a moment before the pause reaches the collector)
        passes_after_pause = [t for t in starts if t >= last_pause - 20]
        if lull_ms:
            assert lulls and lulls[-1] < last_pause, events
            assert passes_after_pause == [], (starts, events)  # the lull's pass was kept
        else:
            assert lulls == []
            assert len(passes_after_pause) == 1, (starts, events)  # a pass at the pause
    # The lull's pass reads the turn up to the lull, the pause's a little more audio: tiny.en
    # may hear one word of this clip differently ("dog suit", "doc suit"), no more.
    reference = manifest["ldc93s1.wav"]["text"]
    assert wer(reference, texts[60]) <= wer(reference, texts[None]) + 1 / len(reference.split())


class SlowDecoder(TimedDecoder):
    """The real decoder, ``delay_secs`` slower a pass (so lulls land while passes run); notes
    when each pass started and ended on the call clock."""

    def __init__(self, decoder: WhisperDecoder, clock: CallClock, delay_secs: float = 0.15) -> None:
        super().__init__(decoder, clock)
        self.delay_secs = delay_secs
        self.passes: list[tuple[float, float]] = []

    def transcribe(self, audio: np.ndarray, *args, **kwargs):
        start = self.clock.now_ms()
        time.sleep(self.delay_secs)
        try:
            return self.decoder.transcribe(audio, *args, **kwargs)
        finally:
            self.passes.append((start, self.clock.now_ms()))


def interims_after_overtaken_passes(
    slow, settings, manifest, overtaker: str
) -> tuple[list[float], list[tuple[float, float]]]:
    """new_home_in_the_stars through ``slow`` at real time. Asserts that an ``overtaker``
    event ("lull", "pause") came while a pass ran, that no interim went out as such a pass
    ended, and that the final is still heard; returns when the interims went out, and the
    overtaken passes (start, end)."""
    name = "new_home_in_the_stars.wav"
    events = asyncio.run(
        transcribe_stream(
            slow, ReplayTurn(name, load_audio(SAMPLES / name, RATE)), settings, slow.clock
        )
    )
    overtakers = [e.at_ms for e in events if e.kind == overtaker]
    interims = [e.at_ms for e in events if e.kind == "interim"]
    # The collector notes an event as recognition takes it in; a pass is overtaken when that
    # came before the pass ended (one a moment after may come after its interim was sent)
    overtaken = [(s, e) for s, e in slow.passes if any(s < t < e for t in overtakers)]
    assert overtaken, (slow.passes, overtakers)  # the case under test happened
    for _, end in overtaken:
        assert not [t for t in interims if end <= t <= end + 30], (end, interims)
    finals = [e.text for e in events if e.kind == "final"]
    assert len(finals) == 1 and wer(manifest[name]["text"], finals[0]) <= 0.15
    return interims, overtaken


def test_an_interim_overtaken_by_a_lull_is_not_sent(decoder, settings, manifest):
    """Its LLM prefill would slow the lull's pass, which starts right after it on the whole
    turn; the lull's pass and the final still come."""
    slow = SlowDecoder(decoder, CallClock())
    interims, _ = interims_after_overtaken_passes(slow, settings, manifest, "lull")
    assert len(interims) >= 3


def test_a_lull_s_pass_starts_beside_the_stale_interim_not_after_it(decoder, settings, manifest):
    """CTranslate2 cannot stop a pass: the lull's pass, which the turn's end waits for,
    starts at once on a second worker while the stale interim runs out. Passes longer than
    the interim interval, so one always runs while the caller speaks."""
    slow = SlowDecoder(decoder, CallClock(), delay_secs=0.35)
    _, overtaken = interims_after_overtaken_passes(slow, settings, manifest, "lull")
    starts = [s for s, _ in slow.passes]
    beside = [t for s, e in overtaken for t in starts if s < t < e]
    assert beside, (slow.passes, overtaken)


def test_an_interim_overtaken_by_the_vad_pause_is_not_sent(decoder, settings, manifest):
    """At the pause the pass over the whole turn is what the turn's end waits for: the LLM's
    prefill of the stale interim took the cores from it (and the LLM's verdict on the pause
    transcript waited behind that prefill). Passes longer than the interim interval, so one
    always runs while the caller speaks, and lulls off: the pause lands inside a pass."""
    slow = SlowDecoder(decoder, CallClock(), delay_secs=0.35)
    no_lull = settings.model_copy(
        update={"turn": settings.turn.model_copy(update={"lull_pass_ms": None})}
    )
    interims, _ = interims_after_overtaken_passes(slow, no_lull, manifest, "pause")
    assert interims  # earlier ones went


def test_silence_and_noise_give_no_transcript(decoder, settings):
    rng = np.random.default_rng(7)
    silence = np.zeros(3 * RATE, dtype=np.int16)
    noise = (rng.normal(0, 0.01, 3 * RATE) * 32767).astype(np.int16)
    for name, audio in (("silence", silence), ("noise", noise)):
        events = stream(decoder, settings, name, audio)
        assert not [e for e in events if e.kind == "final" and e.text.strip()], (name, events)


def test_a_turn_longer_than_30_s_loses_and_repeats_no_words(decoder, settings, manifest):
    clips = ["ldc93s1.wav", "new_home_in_the_stars.wav"]
    gap = np.zeros(RATE * 80 // 1000, dtype=np.int16)
    pieces, reference = [], []
    for _ in range(7):
        for clip in clips:
            pieces += [speech_only(clip), gap]
            reference.append(manifest[clip]["text"])
    audio = np.concatenate(pieces)
    assert len(audio) / RATE > 30
    # Recognition under test, not end of turn: Smart Turn may call a finished sentence the
    # end of the turn at a VAD dip between them; with it off the turn ends after 1.5 s.
    one_turn = settings.model_copy(
        update={"turn": settings.turn.model_copy(update={"smart_turn": False})}
    )
    events = stream(decoder, one_turn, "long", audio)
    finals = [e for e in events if e.kind == "final"]
    assert len(finals) == 1, [e.text for e in finals]
    said = normalise(finals[0].text)
    # Each of the 14 sentences once, from its first words to its last (tiny.en mishears
    # "your dark suit in greasy wash water" in places, and "We" as "You" now and then: that
    # is recognition, not lost words).
    assert said.count("she had") == 7, finals[0].text
    assert said.count("must find a new home in the stars") == 7, finals[0].text
    assert said.endswith("stars"), finals[0].text
    # tiny.en alone gets about a quarter of these words wrong ("Jadakzu and Greecey wash")
    assert wer(" ".join(reference), finals[0].text) <= 0.35, finals[0].text


def test_offline_transcribe_reads_a_file_past_the_whisper_window(decoder, manifest):
    clips = ["new_home_in_the_stars.wav", "ldc93s1.wav"] * 6
    audio = np.concatenate([speech_only(c) for c in clips])
    assert len(audio) / RATE > 30
    said = normalise(transcribe_once(decoder, "long", audio).text)
    assert said.count("we must find a new home in the stars") >= 5, said
    assert said.split()[-1] in normalise(manifest["ldc93s1.wav"]["text"]).split(), said


class FaultInjectionDecoder(WhisperDecoder):
    """Fault injection: every pass raises while ``failing``, as a broken CTranslate2 would."""

    def __init__(self, real: WhisperDecoder) -> None:
        self.__dict__.update(real.__dict__)
        self.failing = True

    def transcribe(self, audio, *args, **kwargs):  # type: ignore[override]
        if self.failing:
            raise RuntimeError("fault injection: CTranslate2 out of memory\nsecond line")
        return super().transcribe(audio, *args, **kwargs)


class HealAfterFirstFinal(FrameProcessor):
    """Fault injection: the decoder recovers once the first turn's final transcript is out."""

    def __init__(self, decoder: FaultInjectionDecoder) -> None:
        super().__init__()
        self._decoder = decoder

    async def process_frame(self, frame, direction) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, TranscriptionFrame):
            self._decoder.failing = False
        await self.push_frame(frame, direction)


def test_a_failing_decoder_reports_a_stage_error_and_the_next_turn_is_recognised(
    decoder, settings, manifest
):
    faulty = FaultInjectionDecoder(decoder)
    turns = [
        ReplayTurn("ldc93s1", load_audio(SAMPLES / "ldc93s1.wav", RATE)),
        ReplayTurn("new_home", load_audio(SAMPLES / "new_home_in_the_stars.wav", RATE)),
    ]
    clock, events = ComputeClock(), []
    pipeline = Pipeline(
        [
            ReplayInput(turns, clock, CallRecorder(RATE), rate=RATE, answer_timeout_secs=5),
            TurnDetector(settings.turn, TurnModels.load(), clock, rate=RATE),
            StreamingWhisperSTT(faulty, settings.asr, clock, rate=RATE),
            HealAfterFirstFinal(faulty),
            TranscriptCollector("call", clock, events),
        ]
    )
    asyncio.run(run_pipeline(pipeline, rate=RATE))
    errors = [e for e in events if e.kind == "error"]
    finals = [e for e in events if e.kind == "final"]
    assert len(errors) == 1, errors  # once per turn, not once per pass
    assert errors[0].text == "RuntimeError: fault injection: CTranslate2 out of memory"
    assert len(finals) == 2, [e.text for e in finals]
    assert finals[0].text == ""  # nothing was recognised: the turn ends without an answer
    assert wer(manifest["new_home_in_the_stars.wav"]["text"], finals[1].text) <= 0.15


@pytest.mark.skipif(not (CORPUS / "main").exists(), reason="needs ../shared/corpus")
def test_a_full_stop_the_caller_goes_on_from_is_read_as_maybe_a_comma(decoder, settings):
    """Whisper closes "These take the shape of a long round arch" with a full stop both at
    the caller's 0.48 s pause after it and at the end of the whole sentence; its probability
    of a comma there instead (``Pass.goes_on``) is about 0.15 at the pause and 0.01 at the
    end, each far from the turn detector's bar."""
    audio = load_audio(CORPUS / "main" / "vctk_p225_008.wav", RATE).astype(np.float32) / 32768
    pause = decoder.transcribe(audio[: int(2.54 * RATE)], goes_on=True)
    end = decoder.transcribe(audio, goes_on=True)
    assert normalise(pause.text).endswith("arch") and pause.text.endswith("."), pause.text
    assert normalise(end.text).endswith("horizon") and end.text.endswith("."), end.text
    above = settings.turn.punctuation_goes_on_above
    assert pause.goes_on is not None and pause.goes_on >= 2 * above, pause.goes_on
    assert end.goes_on is not None and end.goes_on <= above / 2, end.goes_on
    assert decoder.transcribe(audio).goes_on is None  # not asked for
    assert decoder.transcribe(audio, goes_on=True, beam_size=2).goes_on is None


def test_local_agreement_and_loop_cut():
    assert agreed_prefix("ask not what your", "Ask not what you can") == "Ask not what"
    assert agreed_prefix("", "anything") == ""
    words = "ask not what your country ask what you ask what you ask what you can".split()
    assert hallucination_cut(words, secs=8) == 8
    restart = "and so my fellow americans and so my fellow americans and so my".split()
    assert hallucination_cut(restart, secs=2.1) == 5  # 13 words in 2.1 s: a restart
    assert hallucination_cut(restart[:10], secs=4) is None  # said twice, slowly: kept
    assert hallucination_cut("we must find a new home in the stars".split(), secs=3) is None
    # a number read out says a digit three times; a loop says it on and on
    number = "8 6 3 5 5 5 2 9 0 1 8 4 7 6 6".split()
    assert hallucination_cut(number, secs=9.5) is None
    assert hallucination_cut([*number[:12], *["6"] * 8], secs=9.5) == 13
    groups = "1 952 2 9085 462".split()
    assert hallucination_cut(groups * 4, secs=20) == 5
    committed = "we must find a new home".split()
    assert drop_overlap(committed, "home in the stars".split()) == "in the stars".split()
    assert drop_overlap(committed, "in the stars".split()) == "in the stars".split()


def test_a_closing_stamp_past_the_audio_keeps_real_words_and_drops_made_up_ones(decoder):
    """Whisper stamped a whole 8 kHz phone turn 0.0-5.0 s on 3.15 s of audio; it was lost."""

    def ids(start: float, text: str, end: float) -> list[int]:
        stamp = decoder.tokenizer.timestamp_begin
        words = decoder.tokenizer.encode(text)
        return [stamp + round(start / 0.02), *words, stamp + round(end / 0.02)]

    real, looped, _ = decoder.parse_tokens(
        ids(0.0, " We must find a new home in the stars.", 5.0), 3.15, 3.65
    )
    assert real.text == "We must find a new home in the stars." and not looped
    assert real.segments[-1].end == 3.15
    # Eleven words in the last second of audio, stamped past it: made up.
    tail = ids(0.0, " We must find a new home.", 1.5)
    tail += ids(2.1, " Thank you so much for watching and see you next time.", 5.0)
    made_up, _, _ = decoder.parse_tokens(tail, 3.15, 3.65)
    assert made_up.text == "We must find a new home."


def test_a_pass_that_expects_its_length_stops_at_the_restart_and_keeps_the_text(decoder):
    """Whisper restarts a short window until the length limit: a pass told the previous
    pass's length stops just after the restart begins, with the same text; an expectation
    too short for the text is decoded again in full, nothing lost."""
    home = load_audio(SAMPLES / "new_home_in_the_stars.wav", 16000)
    end = speech_bounds(home, 16000)[1]
    audio = home[: end + 960].astype(np.float32) / 32768  # 60 ms after the last word
    limits = []
    real_decode = decoder._decode

    def noting(*args):
        limits.append(args[4])  # (encoded, secs, window, penalty, max_length, forced)
        return real_decode(*args)

    decoder._decode = noting
    try:
        full = decoder.transcribe(audio)
        expected = decoder.transcribe(audio, expect_tokens=full.tokens)
        too_short = decoder.transcribe(audio, expect_tokens=3)
    finally:
        del decoder._decode
    assert full.text == expected.text == too_short.text == "We must find a new home in the stars."
    # max_length counts twice the tokens: over half of the full decode went to restarts
    assert full.tokens < limits[0] / 4 and limits[1] < limits[0]
    assert len(limits) == 4 and limits[2] < limits[3] == limits[0]  # then decoded in full


def test_a_restart_cut_by_the_limit_is_dropped_and_real_text_cut_by_it_is_flagged(decoder):
    def ids(start: float, text: str, end: float | None) -> list[int]:
        stamp = decoder.tokenizer.timestamp_begin
        closing = [] if end is None else [stamp + round(end / 0.02)]
        return [stamp + round(start / 0.02), *decoder.tokenizer.encode(text), *closing]

    home = ids(0.0, " We must find a new home in the stars.", 2.72)
    restart, _, cut = decoder.parse_tokens(home + ids(2.72, " We must", None), 3.2, 3.7, True)
    assert restart.text == "We must find a new home in the stars." and not cut
    more, _, cut = decoder.parse_tokens(home + ids(2.72, " Soon we", None), 3.2, 3.7, True)
    assert more.text == "We must find a new home in the stars. Soon we" and cut
