"""A caller who asks to hear the last answer again hears it again, word for word.

"Can you say that again?" is the one turn whose right answer is a repeat, and the stage
cannot leave it to a small model: the answer editor blocks a sentence said before (that is
how loops are kept out), so the model's honest repeat would be dropped for the fallback
line, and a model asked again often answers something else. The request is told by its
words alone, and only when the turn asks for nothing more ("Can you repeat the booking
number?" goes to the model): then the last answer is spoken again without a model request.
"""

from __future__ import annotations

import re
from typing import Any

from agent.llm.answer import normalise

# Words around the request that do not change it ("Sorry, could you say that again please?").
_AROUND = r"(?:sorry|pardon|excuse me|um+|uh+|oh|hm+|ok|okay|so|and|but|well|hey|please|what|huh)"
_ASK = r"(?:(?:can|could|would|will) you(?: please)?(?: just)?|would you mind)"
_WHAT = r"(?:that|it|this|the last (?:part|bit|answer)|what you (?:just )?said)"
_AGAIN = r"(?:again|once more|one more time)"
_REQUEST = (
    rf"(?:say(?:ing)? {_WHAT}(?: {_AGAIN})?|say {_AGAIN}"
    rf"|repeat(?:ing)?(?: {_WHAT}| yourself)?(?: {_AGAIN})?"
    rf"|come again|pardon(?: me)?|(?:i )?beg your pardon|{_AGAIN}|what did you (?:just )?say"
    rf"|(?:i )?(?:didnt|did not|couldnt|could not|cant|cannot) (?:quite )?"
    rf"(?:catch|hear|get|understand) {_WHAT}|(?:i )?(?:didnt|did not) (?:catch|hear|get) you)"
)
_SAY_AGAIN = re.compile(
    rf"(?:{_AROUND} )*(?:{_ASK} )?{_REQUEST}(?: (?:{_AROUND}|for me|{_AGAIN}|thanks|thank you))*"
)


def asks_to_hear_again(turn: str) -> bool:
    """The caller's turn asks only to hear the last answer again."""
    return _SAY_AGAIN.fullmatch(normalise(turn)) is not None


def answer_to_repeat(history: list[dict[str, Any]]) -> str | None:
    """The bot's last answer, when the newest message is a caller asking to hear it again."""
    if not history or history[-1].get("role") != "user":
        return None
    if not asks_to_hear_again(str(history[-1].get("content") or "")):
        return None
    for message in reversed(history[:-1]):
        if message.get("role") == "assistant" and str(message.get("content") or "").strip():
            return str(message["content"]).strip()
    return None
