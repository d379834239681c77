"""Turn openers: the words a caller starts a turn with before what they want ("Hi,",
"Hello there,", "Okay, so", "Thanks,", "Great.", "Sorry,", "Excuse me,"), which promise more
whatever the voice sounds like. Smart Turn judges the voice and scores "Hi there." at a
comma's pause as a finished turn (0.98 on synthesised speech), so a turn of openers alone
waits for the patience silence before it may end; yes, no and the other short answers are
not openers."""

from __future__ import annotations

from agent.recognition.utterance import has_words
from agent.turns.backchannel import words_of

OPENER_WORDS = frozenset(
    "hi hello hey there okay ok so well and but oh great right alright all thanks thank you "
    "good morning afternoon evening sorry excuse me".split()
)


def only_opens(text: str) -> bool:
    """Whether recognition's words so far are openers alone (hesitations aside)."""
    words = [w for w in words_of(text) if has_words(w)]
    return bool(words) and all(w in OPENER_WORDS for w in words)
