import pytest
from pipecat.frames.frames import LLMFullResponseEndFrame, LLMFullResponseStartFrame, LLMTextFrame
from pipecat.tests.utils import run_test

from agent.frames import FirstPhraseAheadFrame, HeldAnswerTextFrame, PhraseFrame
from agent.synthesis.chunker import PhraseChunker, split_phrase
from agent.synthesis.speakable import speakable


@pytest.mark.parametrize(
    ("text", "spoken"),
    [
        ("**Sure!** Here you go.", "Sure! Here you go."),
        ("- first\n- second", "first second"),
        ("See https://example.com/x?y=1 for more", "See a link for more"),
        ("Great job 🎉👍", "Great job"),
        (
            "It costs $5 at 3:30, e.g. today.",
            "It costs five dollars at three thirty, for example today.",
        ),
        ("About 20% of 150 people", "About twenty percent of one hundred and fifty people"),
        ("```python\nprint(1)\n``` done", "done"),
        ("broken \ufffd char", "broken char"),
    ],
)
def test_speakable(text, spoken):
    assert speakable(text) == spoken


def test_first_phrase_is_released_at_a_clause_or_after_min_words():
    assert split_phrase("Sure, I can ", True, 3, 6) == len("Sure,")
    assert split_phrase("I think that the", True, 3, 6) == len("I think that")
    assert split_phrase("I think that", True, 3, 6) is None  # "that" may still grow
    assert split_phrase("Hello there", True, 3, 6) is None


def test_later_phrases_wait_for_a_sentence_or_a_long_clause():
    assert split_phrase("and then we went, ", False, 3, 6) is None
    assert split_phrase("and then we went to the shop, so ", False, 3, 6) == len(
        "and then we went to the shop,"
    )
    assert split_phrase("That is all. Next", False, 3, 6) == len("That is all.")


def test_abbreviations_and_decimals_do_not_end_a_sentence():
    assert split_phrase("Ask Dr. Smith about it", False, 3, 6) is None
    assert split_phrase("It is 3.5 metres long", False, 3, 6) is None


async def test_a_held_answers_first_phrase_goes_ahead_once_and_as_it_will_be_cut():
    tokens = ["I", "'m", " sorry", " for", " your", " loss", ".", " How"]
    other = ["Well", ",", " yes", "."]
    held = [HeldAnswerTextFrame(text="".join(tokens[: i + 1])) for i in range(len(tokens))]
    held += [HeldAnswerTextFrame(text="".join(other[: i + 1])) for i in range(len(other))]
    released = [LLMFullResponseStartFrame(), *[LLMTextFrame(text=t) for t in tokens],
                LLMFullResponseEndFrame()]  # fmt: skip
    down, _ = await run_test(
        PhraseChunker(first_min_words=2, min_words=6), frames_to_send=[*held, *released]
    )
    ahead = [f.text for f in down if isinstance(f, FirstPhraseAheadFrame)]
    phrases = [f.text for f in down if isinstance(f, PhraseFrame)]
    assert ahead == ["I'm sorry", "Well,"]  # one per held answer
    assert phrases[0] == ahead[0]  # the phrase the released answer starts with
    assert not [f for f in down if isinstance(f, HeldAnswerTextFrame)]
