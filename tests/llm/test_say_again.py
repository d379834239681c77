"""A caller asking to hear the last answer again hears it again, word for word, with no model
request; a turn that asks for something more ("repeat the booking number") goes to the model.
A scripted engine (``ScriptedAnswers``) stands in for the model."""

from __future__ import annotations

import pytest

from agent.llm.say_again import answer_to_repeat, asks_to_hear_again
from tests.support.fakes import ScriptedAnswers
from tests.support.llm_stage import history, spoken

ASKS = [
    "Can you say that again?",
    "Sorry, could you repeat that one more time, please?",
    "Pardon?",
    "I beg your pardon?",
    "What did you say?",
    "Sorry, I didn't catch that.",
    "Come again?",
    "Would you mind repeating that?",
    "Um, say it again for me.",
]
ASKS_MORE = [
    "Can you repeat the booking number?",
    "What did you say about the weather?",
    "Can you say something in French?",
    "What was my booking number again?",
    "Say hello to my mother.",
    "Sorry.",
    "What?",
]


@pytest.mark.parametrize("turn", ASKS)
def test_a_request_to_hear_it_again_is_told_by_its_words(turn: str):
    assert asks_to_hear_again(turn)


@pytest.mark.parametrize("turn", ASKS_MORE)
def test_a_turn_that_asks_for_more_is_not_such_a_request(turn: str):
    assert not asks_to_hear_again(turn)


def test_the_last_answer_is_the_one_said_again():
    messages = history("Hi.", "Hello, how can I help?", "How many days in a week?",
                       "There are seven days in a week.", "Say that again?")  # fmt: skip
    assert answer_to_repeat(messages) == "There are seven days in a week."
    assert answer_to_repeat(history("Say that again?")) is None  # nothing said yet


async def test_the_stage_says_the_last_answer_again_without_asking_the_model():
    engine = ScriptedAnswers("Something else entirely.")
    messages = history("How many days in a week?", "There are seven days in a week.",
                       "Sorry, can you say that again?")  # fmt: skip
    assert await spoken(engine, messages) == "There are seven days in a week."
    assert engine.requests == []


async def test_a_turn_asking_for_more_goes_to_the_model():
    engine = ScriptedAnswers("Your booking number is 358.")
    messages = history("My booking number is 3 5 8.", "Got it.", "Can you repeat the number?")
    assert await spoken(engine, messages) == "Your booking number is 358."
    assert len(engine.requests) == 1
