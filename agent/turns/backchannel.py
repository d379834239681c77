"""Backchannels: the short acknowledgements a caller makes while the bot talks ("mm-hmm",
"yeah", "okay", "right"), which must not stop the answer; anything else said over the bot
("wait", "no, stop", "actually I meant ...", a question) is an interruption."""

from __future__ import annotations

import re

from agent.recognition.utterance import has_words

# Words and phrases (lower case, no punctuation) that only acknowledge, alone or repeated.
# Hesitations and hums ("mm", "hmm", "uh") are no words at all to ``has_words``, so they
# count too.
BACKCHANNEL_WORDS = frozenset(
    "yes yeah yep yup yea ya uh-huh mm-hmm mhm mm-hm um-hum okay ok right alright sure cool "
    "great nice wow oh ah aha gotcha true exactly indeed totally thanks".split()
)
BACKCHANNEL_PHRASES = ("i see", "got it", "all right", "i got it", "makes sense", "thank you")


def words_of(text: str) -> list[str]:
    """The words of a transcript, lower case, hyphens kept ("uh-huh"), punctuation dropped."""
    return [w for w in re.sub(r"[^a-z0-9' -]", " ", text.lower()).split() if w.strip("-'")]


def is_backchannel(text: str) -> bool:
    """Whether what the caller said over the bot only acknowledges it: no word at all (a hum,
    a cough) or acknowledgement words alone ("Yeah, yeah.", "Okay.", "Mm-hmm, I see")."""
    if not has_words(text):
        return True
    rest = f" {' '.join(words_of(text))} "
    for phrase in BACKCHANNEL_PHRASES:
        rest = rest.replace(f" {phrase} ", " ")
    return all(w in BACKCHANNEL_WORDS or not has_words(w) for w in rest.split())
