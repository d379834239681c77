"""Eval grading on hand-made calls: no models, so these run in milliseconds."""

from __future__ import annotations

import json

import numpy as np
import pytest
import soundfile as sf

from agent.errors import UserError
from agent.evaluation.answers import CallAnswers, echoes, loops
from agent.evaluation.grading import assign_turns, bot_onsets, grade_call, in_order
from agent.evaluation.manifest import load_manifest
from agent.evaluation.run import overall
from agent.evaluation.text import duplicated_phrases, normalise, stray_words, wer
from agent.recognition.numbers import spoken_digits, written_digits
from agent.timing.record import TurnRecord
from agent.transports.replay import PlayedClip

RATE = 16000


def record(opened: float, user: str, bot: str, turn_end: float | None = None) -> TurnRecord:
    end = turn_end if turn_end is not None else opened + 500
    return TurnRecord(
        turn=1, user_text=user, bot_text=bot, voice_to_voice_ms=None,
        events={"speech_start": opened, "turn_end": end, "stt_final": end},
        stages={"endpointing": 200.0}, turn_end_reason="smart_turn",
    )  # fmt: skip


def test_whisper_normaliser_merges_numbers_and_spelling():
    assert normalise("Mr. Smith's colour, 1813!") == normalise("mister smith's color 1813")
    assert normalise("one two three") == normalise("123")  # spoken digits, one token
    assert wer([("the cat sat down", "the cat sat down")]) == 0
    pairs = [("the cat sat down", "the cat sat"), ("a dog", "a dog")]
    assert wer(pairs) == pytest.approx(1 / 6)


def test_a_phrase_heard_twice_and_words_heard_outside_the_speech_are_counted():
    # The streaming machinery's own errors (issue texts from real recordings).
    said = "I can't argue with you, and you know that."
    assert duplicated_phrases(said, f"{said} And you know that...") == ["and you know that"]
    assert duplicated_phrases("In 1813 the war began.", "In 18 13, in 18 13. The war began.")
    assert duplicated_phrases(
        "It has never been surpassed, they say.",
        "It has never been surpassed, as never been surpassed, they say.",
    ) == ["never been surpassed"]
    # Said twice is heard twice; misheard words are not duplicates.
    twice = "the cat and the dog and the cat and the dog"
    assert duplicated_phrases(twice, twice) == []
    assert (
        duplicated_phrases(
            "a rod is used to catch pink salmon", "it rotors used to catch paint salmon"
        )
        == []
    )
    ask = "Ask not what your country can do for you."
    assert stray_words(ask, "S. Ask not what your country can do for you.") == ["s"]
    assert stray_words(ask, "Ask not what your country can do for you. Yes.") == ["yes"]
    assert stray_words(ask, "Ask not what your country can do for you.") == []
    assert stray_words(ask, "Ask not what the country can do for you.") == []  # misheard
    assert stray_words(ask, "Ask not what your country can do for all of you.") == []


def test_answer_checks_find_repeats_loops_and_echoes():
    calls = CallAnswers()
    assert calls.check("what is your name", "I am Joe. How can I help?").problems == []
    again = calls.check("what time is it", "I am Joe. How can I help?")
    assert {"repeated", "repeated_sentence"} <= set(again.problems)
    assert loops("The sky is blue. It is nice. The sky is blue.")
    assert not loops("Yes. Yes. The sky is blue.")  # short sentences may come back
    assert echoes("what part of the united states is your home", "The United States is your home.")
    assert not echoes("what is the capital of france", "The capital is Paris.")
    # Read back behind words of its own (real-time main/ answers the opening rule missed).
    snake = "We also need a small plastic snake and a big toy frog for the kids."
    assert echoes(snake, "You also need a small plastic snake and a big toy frog for the kids.")
    assert echoes("People look, but no one ever finds it.",
                  "You have the ability to look, but no one ever finds it.")  # fmt: skip
    assert not echoes(snake, "What will the kids do with the frog?")
    assert calls.check("hello there", "").problems == ["empty"]
    # Asked for: the same answer again is no repeat.
    assert calls.check("sorry can you say that again", "I am Joe. How can I help?").problems == []


def test_bot_onsets_need_a_gap_of_silence():
    bot = np.zeros(RATE * 3, dtype=np.int16)
    bot[RATE // 2 : RATE] = 100  # 0.5-1.0 s
    bot[RATE + RATE // 10 : RATE + RATE // 5] = 100  # 100 ms later: the same stretch
    bot[2 * RATE :] = 100  # after 0.8 s of silence: a new onset
    assert bot_onsets(bot, RATE) == [RATE // 2, 2 * RATE]


def test_turns_belong_to_the_clip_playing_when_they_opened():
    played = [PlayedClip("a", 0, 3000), PlayedClip("b", 5000, 8000)]
    turns = [record(800, "x", "y"), record(1500, "z", "w"), record(5100, "q", "r")]
    assert assign_turns(turns, played) == [turns[:2], turns[2:]]


def two_clip_call(tmp_path, second: dict | None = None) -> tuple[list, list[PlayedClip]]:
    """call.wav with caller speech at 1-3 s (clip a) and 6-8 s (clip b), the bot starting
    at 2.0 s (inside a) and 8.5 s; the manifest's clips and when each was played."""
    user = np.zeros(RATE * 10, dtype=np.int16)
    bot = np.zeros_like(user)
    rng = np.random.default_rng(1)
    user[RATE : 3 * RATE] = (rng.normal(0, 3000, 2 * RATE)).astype(np.int16)  # clip a: 1-3 s
    user[6 * RATE : 8 * RATE] = (rng.normal(0, 3000, 2 * RATE)).astype(np.int16)  # b: 6-8 s
    bot[2 * RATE : 2 * RATE + 1000] = 500  # bot starts at 2.0 s, inside clip a's speech
    bot[8 * RATE + 8000 :] = 500  # 0.5 s after clip b's speech
    sf.write(tmp_path / "call.wav", np.stack([user, bot], axis=1), RATE, subtype="PCM_16")
    manifest = tmp_path / "m.jsonl"
    (tmp_path / "a.wav").write_bytes(b"")
    (tmp_path / "b.wav").write_bytes(b"")
    manifest.write_text(
        json.dumps({"file": "a.wav", "text": "hello there"}) + "\n"
        + json.dumps(second or {"file": "b.wav", "text": "how are you", "pauses": [[0.5, 0.9]]})
        + "\n"
    )  # fmt: skip
    return load_manifest(manifest), [PlayedClip("a", 500, 4000), PlayedClip("b", 5500, 9000)]


def test_grade_call_reads_cut_offs_and_voice_to_voice_off_call_wav(tmp_path):
    clips, played = two_clip_call(tmp_path)
    records = [record(1000, "hello", "Hi."), record(2500, "there", "Hi.")]
    records.append(record(6000, "how are you", "Fine."))
    offline = ["hello there", "how are you"]
    a, b = grade_call(tmp_path / "call.wav", clips, played, records, offline)
    assert a.turns == 2 and a.splits == 1 and a.cutoffs and 1990 <= a.cutoffs[0] <= 2010
    assert a.streaming_errors == 0 and a.offline_errors == 0
    assert a.answer_problems == [[], ["repeated"]]
    assert b.turns == 1 and not b.cutoffs and b.pauses == 1
    assert b.voice_to_voice_ms == pytest.approx(500, abs=15)
    assert a.duplicated == a.stray == b.duplicated == b.stray == []


def test_words_of_a_merged_clip_are_not_stray(tmp_path):
    clips, played = two_clip_call(tmp_path, {"file": "b.wav", "text": "fine thanks"})
    # Clip a's turn ran on into clip b's speech (turn end 7.5 s); clip b opened no turn.
    merged = [record(1000, "Um, S. Hello there, fine thanks.", "Good.", turn_end=7500)]
    a, b = grade_call(tmp_path / "call.wav", clips, played, merged, ["hello there", "fine"])
    assert b.merged and a.stray == ["s"]  # the sound before the words is; b's words are not
    cold = [record(1000, "S. Hello there, fine thanks.", "Good."), record(6000, "", "")]
    a, _ = grade_call(tmp_path / "call.wav", clips, played, cold, ["hello there", "fine"])
    assert a.stray == ["s", "fine", "thanks"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("not json\n", "is not JSON"),
        ('{"file": "x.wav"}\n', "text"),
        ('{"file": "missing.wav", "text": "hi"}\n', "not found"),
        ("\n", "has no clips"),
    ],
)
def test_bad_manifests_are_one_clear_line(tmp_path, content, message):
    manifest = tmp_path / "m.jsonl"
    manifest.write_text(content)
    with pytest.raises(UserError, match=message):
        load_manifest(manifest)


def answered(opened: float, user: str, audio_at: float, interim: str = "") -> TurnRecord:
    """A turn whose answer's audio started at ``audio_at`` ms."""
    turn = record(opened, user, "Sure.")
    events = {**turn.events, "first_audio_out": audio_at}
    return turn.model_copy(update={"events": events, "last_interim_text": interim})


def test_talk_over_counts_bot_audio_over_the_caller_s_voice_not_over_the_pauses(tmp_path):
    """Caller: voice at 1.0-2.0 s and 2.5-3.5 s (a pause between); the bot answers the first
    part at 1.8-2.7 s: 200 ms over the voice before the pause and 200 ms after it, none in
    the pause. The second answer, after the caller finished, talks over nothing."""
    user = np.zeros(RATE * 6, dtype=np.int16)
    bot = np.zeros_like(user)
    rng = np.random.default_rng(2)
    for a, b in ((1.0, 2.0), (2.5, 3.5)):
        user[int(a * RATE) : int(b * RATE)] = rng.normal(0, 3000, int((b - a) * RATE))
    bot[int(1.8 * RATE) : int(2.7 * RATE)] = 500
    bot[int(4.0 * RATE) : int(5.0 * RATE)] = 500
    sf.write(tmp_path / "call.wav", np.stack([user, bot], axis=1), RATE, subtype="PCM_16")
    (tmp_path / "a.wav").write_bytes(b"")
    manifest = tmp_path / "m.jsonl"
    manifest.write_text(json.dumps({"file": "a.wav", "text": "one two"}) + "\n")
    records = [answered(1000, "one", 1800), answered(2500, "two", 4000)]
    (clip,) = grade_call(
        tmp_path / "call.wav", load_manifest(manifest), [PlayedClip("a", 500, 6000)],
        records, ["one two"],
    )  # fmt: skip
    assert clip.talk_over_ms == pytest.approx(400, abs=30)
    assert clip.talk_over_turns_ms[0] == pytest.approx(400, abs=30)
    assert clip.talk_over_turns_ms[1] == 0
    figures = overall([clip], records)["talk_over"]
    assert figures["clips_over_200ms"] == 1 and figures["share_over_200ms"] == 1.0
    assert figures["turns_p50"] == pytest.approx(200, abs=30)


def test_a_dictated_number_is_whole_only_in_one_turn_and_lost_words_are_counted(tmp_path):
    """A number split over two turns keeps its digits in order but is not whole; a final
    with fewer words than the turn's last interim is a loss, however the digits are written."""
    clips, played = two_clip_call(
        tmp_path, {"file": "b.wav", "text": "two two four one five", "digits": "22415"}
    )
    records = [
        answered(1000, "hello there", 2000, interim="hello there"),
        answered(6000, "2, 2, 4", 8500, interim="two two four"),  # as many words
        answered(7000, "1 5", 9000, interim="1, 5, 9"),  # a word lost
    ]
    a, b = grade_call(tmp_path / "call.wav", clips, played, records, ["hello there", "22415"])
    assert a.digits is None and a.dictation_whole is None and a.words_lost == 0
    assert b.digits_heard == ["224", "15"] and b.digits_recalled == 5
    assert b.dictation_whole is False and b.words_lost == 1
    whole = [records[0], answered(6000, "22415", 8500, interim="2, 2, 4, 1, 5")]
    _, b = grade_call(tmp_path / "call.wav", clips, played, whole, ["hello there", "22415"])
    assert b.dictation_whole is True and b.digits_recalled == 5 and b.words_lost == 0
    figures = overall([a, b], whole)
    assert figures["dictation"] == {"clips": 1, "whole": 1, "digits": 5, "recalled": 5}


def test_spoken_digits_are_read_in_order_and_dictated_runs_written_as_digits():
    assert spoken_digits("Oh, nice. Two two, four; double one. 5") == "224115"
    assert spoken_digits("oh five five") == "055"
    assert in_order("2241", "22415") == 4 and in_order("9224150", "22415") == 5
    assert in_order("51422", "22415") == 2
    assert written_digits("2, 2, 4, 1, 5, 8, 3, 6.") == "22415836."
    assert written_digits("It's two, nine, seven, eight, two?") == "It's 29782?"
    assert written_digits("9-8-4-3-75-1-1-0") == "9843 75 110"
    assert written_digits("Oh double five, one two three") == "055123"
    # a sentence's few numbers and a list of years are no dictation
    for text in ("Six spoons, five thick slabs and two or three", "In 1813, 1814, 1815."):
        assert written_digits(text) == text
