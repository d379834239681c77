"""A turn that goes on from the caller's previous one is heard with it before it.

Whisper, cold at the start of a window, drops or mishears the first words of a sentence it
joins mid-way ("there is also to give a bow" for "the result is to give a bow"); the next
turn's passes read the previous turn's audio and words first and give only the new words.
Smart Turn, hearing only the words after a pause, hears a clause that sounds whole; it hears
the sentence from its start instead.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from agent import model_store
from agent.audio import load_audio
from agent.clock import ComputeClock
from agent.evaluation.transcribe import final_texts, transcribe_stream
from agent.recognition.streaming_stt import CONTEXT_MAX_SECS, _PreviousTurn
from agent.recognition.utterance import Utterance
from agent.recognition.whisper_decoder import RATE, Context, WhisperDecoder, Word
from agent.transports.g711 import through_phone_line
from agent.transports.replay import ReplayTurn
from agent.turns.detector import TurnDetector
from tests.support.clips import CORPUS
from tests.support.fakes import HeardOut
from tests.support.transcripts import normalise, wer

# "If the red of the second bow falls upon the green of the first, [0.44 s] the result is to
# give a bow with an abnormally wide yellow band, [0.56 s] since red and green light when
# mixed form yellow."
RAINBOW = CORPUS / "pauses" / "vctk_p225_023.wav"
RAINBOW_TEXT = (
    "If the red of the second bow falls upon the green of the first, the result is to give a "
    "bow with an abnormally wide yellow band, since red and green light when mixed form yellow."
)
needs_corpus = pytest.mark.skipif(not RAINBOW.exists(), reason="needs ../shared/corpus")


def pcm(secs: float, value: int = 1000) -> bytes:
    return np.full(int(secs * RATE), value, dtype=np.int16).tobytes()


def sound(secs: float) -> np.ndarray:
    return np.full(int(secs * RATE), 0.03, dtype=np.float32)


def test_a_turn_soon_after_the_last_reads_it_with_the_silence_between():
    previous = _PreviousTurn(sound(2.0), [("the red of the second bow,", 0)], ended_at=10 * RATE)
    # the new turn's audio (its pre-roll) starts 0.5 s after the last one ended
    context = previous.context(lead_starts_at=int(10.5 * RATE), now=11 * RATE, gap_secs=2.0)
    assert context is not None
    assert context.prefix == "the red of the second bow,"
    assert len(context.audio) == int(2.5 * RATE)
    assert np.all(context.audio[int(2.0 * RATE) :] == 0)  # the gap is silence to the decoder
    assert np.all(context.audio[: int(2.0 * RATE)] > 0)


def test_a_pre_roll_reaching_into_the_last_turn_is_not_read_twice():
    previous = _PreviousTurn(sound(2.0), [("yes", 0)], ended_at=10 * RATE)
    context = previous.context(lead_starts_at=int(9.8 * RATE), now=int(10.4 * RATE), gap_secs=2.0)
    assert context is not None and len(context.audio) == int(1.8 * RATE)


def test_a_turn_long_after_the_last_or_after_a_long_one_is_heard_alone():
    previous = _PreviousTurn(sound(2.0), [("yes", 0)], ended_at=10 * RATE)
    assert previous.context(int(12 * RATE), now=int(12.6 * RATE), gap_secs=2.0) is None
    long = _PreviousTurn(sound(CONTEXT_MAX_SECS + 1), [("a long turn", 0)], ended_at=10 * RATE)
    assert long.context(int(10.2 * RATE), now=int(10.8 * RATE), gap_secs=2.0) is None


def test_a_turn_with_no_words_stays_in_the_audio_the_next_one_reads():
    """A word like "peas", too short alone to tell from a noise: the next turn may hear it."""
    previous = _PreviousTurn(sound(2.0), [("six spoons of fresh snow", 0)], ended_at=10 * RATE)
    joined = previous.then_no_words(sound(0.8), starts_at=int(10.2 * RATE), ended_at=11 * RATE)
    context = joined.context(lead_starts_at=int(11.5 * RATE), now=12 * RATE, gap_secs=2.0)
    assert context is not None and context.prefix == "six spoons of fresh snow"
    assert len(context.audio) == int(3.5 * RATE)  # 2.0 + 0.2 silence + 0.8 + 0.5 silence
    assert np.all(context.audio[int(2.2 * RATE) : int(3.0 * RATE)] > 0)


def test_words_heard_again_go_to_the_turn_whose_audio_holds_them():
    # two turns: "six spoons of fresh snow." (0-2 s), then "peas, five thick slabs." (2.5 s-)
    parts = [("six spoons of fresh snow.", 0), ("peace, five thick slabs.", int(2.5 * RATE))]
    turns = _PreviousTurn(sound(4.0), parts, ended_at=10 * RATE)
    words = ["six", "spoons", "of", "fresh", "snow", "peas,", "five", "thick", "slabs"]
    timed = [Word(w, 0.4 * i, 0.4 * i + 0.3) for i, w in enumerate(words)]  # peas: 2.0-2.3 s
    assert turns.heard_again(timed) == [
        ("six spoons of fresh snow.", "six spoons of fresh snow peas,"),
        ("peace, five thick slabs.", "five thick slabs"),
    ]
    assert turns.text == "six spoons of fresh snow peas, five thick slabs"  # told from now on
    assert turns.heard_again(timed) is None  # as told: nothing to revise
    # a turn whose words would all go to another is not revised (its record would be empty)
    assert turns.heard_again(timed[:5]) is None


def test_a_turn_that_goes_on_from_one_that_went_on_reads_both_within_the_limit():
    first = _PreviousTurn(sound(2.0), [("the red of the second bow", 0)], ended_at=10 * RATE)
    both = first.then(
        sound(1.5), "falls upon the green", starts_at=int(10.3 * RATE), ended_at=12 * RATE
    )
    assert both.parts == [
        ("the red of the second bow", 0),
        ("falls upon the green", int(2.3 * RATE)),
    ]
    assert len(both.audio) == int(3.8 * RATE)
    assert both.text == "the red of the second bow falls upon the green"
    long = both.then(sound(CONTEXT_MAX_SECS - 3), "of the first", int(12.2 * RATE), 20 * RATE)
    assert long.parts == [("of the first", 0)]  # all three would pass the limit: the last alone


def test_the_previous_words_lose_the_full_stop_recognition_put_at_the_pause():
    assert Context("Since then.", np.zeros(RATE, np.float32)).prefix == "Since then"
    assert Context("the first,", np.zeros(RATE, np.float32)).prefix == "the first,"


def test_a_short_sound_is_read_alone_so_the_noise_rule_still_hears_it():
    """Whisper's no-speech probability tells a click from a word only without the context."""
    context = Context("so", np.zeros(RATE, np.float32))
    utt = Utterance(pcm(0.6), context, context_after_secs=1.4)
    utt.add(pcm(0.5))
    assert utt.snapshot().context is None
    utt.add(pcm(0.5))
    assert utt.snapshot().context is context


@pytest.fixture(scope="module")
def decoder(settings) -> WhisperDecoder:
    path = model_store.resolve(settings.asr.model, "asr", settings.models_dir)
    return WhisperDecoder(path, compute_type="int8", threads=2, language="en")


def rainbow() -> tuple[np.ndarray, np.ndarray]:
    """The clip's first clause and the rest, cut in the middle of the first pause."""
    audio = load_audio(RAINBOW, RATE).astype(np.float32) / 32768.0
    cut = int(3.08 * RATE)
    return audio[:cut], audio[cut:]


@needs_corpus
@pytest.mark.slow
def test_the_context_gives_only_the_new_words_timed_in_their_own_audio(decoder):
    first, rest = rainbow()
    heard = decoder.transcribe(first).text
    assert "first" in normalise(heard)
    result = decoder.transcribe(rest, words=True, context=Context(heard, first))
    text = normalise(result.text)
    assert text.startswith("the result is to give a bow"), result.text
    assert "second bow" not in text and "first" not in text
    assert result.text[:1].isalnum()  # no punctuation left over from the forced words
    assert [w.text for w in result.words] == result.text.split()
    secs = len(rest) / RATE
    assert all(0 <= w.start <= w.end <= secs + 0.5 for w in result.words), result.words
    assert result.words[0].start < 1.0  # "the" comes right after the pause, not 3 s in


def vad_only_turns(settings, **asr):
    """Turns that end at every pause of 0.3 s, so the rainbow clip is heard in three."""
    turn = settings.turn.model_copy(update={"smart_turn": False, "max_silence_secs": 0.3})
    asr_settings = settings.asr.model_copy(update=asr)
    return settings.model_copy(update={"turn": turn, "asr": asr_settings})


class ContextSpy:
    """The real decoder, noting the context each pass was given."""

    def __init__(self, decoder: WhisperDecoder) -> None:
        self.decoder, self.contexts = decoder, []

    def transcribe(self, audio, *args, context=None, **kwargs):
        self.contexts.append(context)
        return self.decoder.transcribe(audio, *args, context=context, **kwargs)


@needs_corpus
@pytest.mark.slow
def test_a_sentence_split_at_its_pauses_is_heard_as_one(decoder, settings):
    turn = ReplayTurn(RAINBOW.name, load_audio(RAINBOW, RATE))
    spy = ContextSpy(decoder)
    events = asyncio.run(transcribe_stream(spy, turn, vad_only_turns(settings), ComputeClock()))
    finals = [e.text for e in events if e.kind == "final"]
    assert len(finals) == 3, finals  # the case under test: two pauses ended turns
    heard = final_texts(events)  # the first two as heard again with the turn after them
    # the second turn's passes read the first, its closing full stop left off; the third's
    # read both
    contexts = [c for c in spy.contexts if c is not None]
    assert contexts[0].prefix == finals[0].rstrip("."), (contexts[0], finals)
    assert normalise(contexts[-1].text) == normalise(" ".join(heard[:2])), (contexts[-1], heard)
    assert normalise(heard[1]).startswith("the result is"), heard
    assert wer(RAINBOW_TEXT, " ".join(heard)) <= 0.06, heard  # a word at most (offline: 2)

    cold = ContextSpy(decoder)
    off = vad_only_turns(settings, context_gap_secs=None)
    alone = asyncio.run(transcribe_stream(cold, turn, off, ComputeClock()))
    assert len([e for e in alone if e.kind == "final"]) == 3
    assert cold.contexts and not any(cold.contexts)  # null: every turn heard alone


# "These take the shape of a long round arch, [0.58 s] with its path high above, [0.84 s] and
# its two ends apparently beyond the horizon."
ARCH = CORPUS / "pauses" / "vctk_p226_008.wav"


def arch_on_the_phone() -> np.ndarray:
    return through_phone_line(load_audio(ARCH, RATE))


@needs_corpus
@pytest.mark.slow
def test_the_words_before_a_pause_are_heard_again_with_the_words_after_it(decoder):
    """Through the phone codec tiny.en hears the clause before the first pause, alone, as
    "Please take the shape of a long round arch." (on an AVX-512 Xeon); forced as the next
    part's start, those words stay. Heard again with the next part, they are "These take".
    The misheard words are given, so the test holds where the clause alone is heard right."""
    audio = arch_on_the_phone().astype(np.float32) / 32768.0
    cut = int(2.83 * RATE)  # the middle of the first pause
    first, rest = audio[:cut], audio[cut:]
    misheard = Context("Please take the shape of a long round arch.", first)
    forced = decoder.transcribe(rest, context=misheard)
    assert forced.context_words is None
    again = decoder.transcribe(rest, words=True, context=misheard, hear_context=True)
    assert again.context_words is not None
    before = " ".join(w.text for w in again.context_words)
    assert normalise(before) == "these take the shape of a long round arch", before
    assert all(w.end <= len(first) / RATE + 0.1 for w in again.context_words)
    assert normalise(again.text).startswith("with its path"), again.text
    assert "arch" not in normalise(again.text)  # no word of the first part heard twice
    assert [w.text for w in again.words] == again.text.split()
    assert 0 <= again.words[0].start < 1.0  # timed in its own audio


@needs_corpus
@pytest.mark.slow
def test_a_turn_split_on_the_phone_is_told_again_with_its_first_words_right(decoder, settings):
    """Whatever the first part alone is heard as, the turns end with its words right, and a
    revision of the words told is what set them right."""
    turn = ReplayTurn(ARCH.name, arch_on_the_phone())
    events = asyncio.run(transcribe_stream(decoder, turn, vad_only_turns(settings), ComputeClock()))
    finals = [e.text for e in events if e.kind == "final"]
    assert len(finals) >= 2, finals  # the case under test: the first pause ended a turn
    heard = final_texts(events)
    assert normalise(heard[0]).startswith("these take the shape"), heard
    assert len(heard) == len(finals)  # a turn's words are replaced, no turn added or lost
    if heard[0] != finals[0]:
        revisions = [e for e in events if e.kind == "revision"]
        assert revisions and revisions[0].revised[0][0] == finals[0], revisions


@needs_corpus
@pytest.mark.slow
def test_smart_turn_hears_a_turn_that_goes_on_with_the_one_before_it(decoder, settings):
    """The rainbow's arch, "These take the shape of a long round arch, [0.6 s] with its path
    high above, [0.8 s] and its two ends ...": after a turn ended at the first pause, Smart
    Turn scored the second 0.9 hearing "with its path high above" alone, 0.02-0.08 hearing
    the sentence from its start."""
    turn = ReplayTurn(ARCH.name, load_audio(ARCH, RATE))
    events = asyncio.run(transcribe_stream(decoder, turn, settings, ComputeClock()))
    finals = [normalise(e.text) for e in events if e.kind == "final"]
    assert any("path" in f and "horizon" in f for f in finals), finals


@needs_corpus
@pytest.mark.slow
@pytest.mark.parametrize("answered", [False, True], ids=["went_on", "after_an_answer"])
def test_a_turn_after_an_answer_heard_out_is_a_new_turn(decoder, settings, answered, monkeypatch):
    """ "A golden fortune and a happy life." then, about a second later, "We also need a small
    plastic snake ...": with no answer between, the caller went on (recognition and Smart
    Turn read the first turn too); after an answer heard to its end, the second is a new
    turn, heard and judged alone (one-word replies of `short/` judged with the turn before
    the answer waited for the silence fallback)."""
    clips = ["main/librispeech_61-70968-0002.wav", "main/vctk_p232_004.wav"]
    turns = [ReplayTurn(c, load_audio(CORPUS / c, RATE)) for c in clips]
    spans_secs = []  # how much audio each turn's Smart Turn window starts from
    open_turn = TurnDetector._open_turn

    async def noting(detector: TurnDetector, start: float) -> None:
        await open_turn(detector, start)
        spans_secs.append((detector._heard - detector._continuation.turn_from) / RATE)

    monkeypatch.setattr(TurnDetector, "_open_turn", noting)
    spy = ContextSpy(decoder)
    bot = [HeardOut()] if answered else []
    events = asyncio.run(transcribe_stream(spy, turns, settings, ComputeClock(), bot))
    finals = [e.text for e in events if e.kind == "final"]
    assert len(finals) == 2 and "snake" in normalise(finals[1]), finals
    first_secs = len(turns[0].samples) / RATE
    final_pass = spy.contexts[-1]  # the second turn's final pass
    if answered:
        assert spans_secs[1] < 1.0, spans_secs
        assert final_pass is None
    else:
        assert spans_secs[1] > first_secs / 2, spans_secs
        assert final_pass is not None and "fortune" in final_pass.text.lower()
