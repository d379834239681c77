"""Digits as a caller reads them: a dictated number written as digits, in order.

Whisper writes a number read digit by digit in any of several ways ("two, two, four",
"2, 2, 4.", "2-2-4", "224"); a person taking it down writes "224". A run of at least
``MIN_RUN`` single digits (a digit, a digit word, "oh" for zero, "double five") is joined
into one number; shorter runs and numbers of several digits ("1813, 1814") are left as
written, since a sentence says "two or three" and a list of years is no dictation.
"""

from __future__ import annotations

import re

DIGIT_WORDS = {
    "zero": "0", "oh": "0", "o": "0", "nought": "0",
    "one": "1", "two": "2", "three": "3", "four": "4", "five": "5",
    "six": "6", "seven": "7", "eight": "8", "nine": "9",
}  # fmt: skip
ZERO_LETTERS = {"oh", "o"}  # zero as a caller says it, and as Whisper may spell it
REPEATS = {"double": 2, "triple": 3}
MIN_RUN = 3  # single digits in a row that make a dictated number
# a token: a word with the punctuation around it ("2," "five." "(7")
_TOKEN = re.compile(r"\S+")
_CORE = re.compile(r"^([^\w']*)([\w']+)([^\w']*)$")


def _digit(word: str) -> str | None:
    """The digit one word says, if it says one."""
    word = word.lower()
    if len(word) == 1 and word.isdigit():
        return word
    return DIGIT_WORDS.get(word)


def _says_digits(word: str) -> bool:
    """Whether a word surely belongs to a number ("oh" alone may be a sigh)."""
    return (
        word in REPEATS or word.isdigit() or (_digit(word) is not None and word not in ZERO_LETTERS)
    )


def spoken_digits(text: str) -> str:
    """Every digit the text says, in order (digits, digit words, "double five"; "oh" only
    beside another digit, not "Oh, nice."): what a grader compares with the number read."""
    words = re.findall(r"[\w']+", text.lower())
    out: list[str] = []
    for i, word in enumerate(words):
        digit = _digit(word)
        if word in ZERO_LETTERS:
            near = words[max(0, i - 1) : i] + words[i + 1 : i + 2]
            if not any(_says_digits(w) for w in near):
                continue
        times = REPEATS.get(words[i - 1], 1) if i else 1
        if digit is not None:
            out.append(digit * times)
        elif word.isdigit():
            out.append(word)
    return "".join(out)


def written_digits(text: str) -> str:
    """The text with each dictated number (``MIN_RUN`` single digits or more in a row,
    whatever punctuation Whisper put between them) written as one run of digits; the
    punctuation after its last digit is kept."""
    tokens = _TOKEN.findall(re.sub(r"(?<=\d)-(?=\d)", " ", text))
    out: list[str] = []
    i = 0
    while i < len(tokens):
        run, j, lead, tail = _digit_run(tokens, i)
        if len("".join(run)) >= MIN_RUN:
            out.append(lead + "".join(run) + tail)
            i = j
        else:
            out.append(tokens[i])
            i += 1
    return " ".join(out)


def _digit_run(tokens: list[str], i: int) -> tuple[list[str], int, str, str]:
    """The single digits said from token ``i`` on ("double five" is two), the token after
    them, and the punctuation before the first and after the last."""
    run: list[str] = []
    lead = tail = ""
    j = i
    while j < len(tokens) and (parts := _CORE.match(tokens[j])) is not None:
        before, word, after = parts.groups()
        if j > i and before:
            break  # "(" or a quote opens something else
        times, step = 1, 1
        following = _CORE.match(tokens[j + 1]) if j + 1 < len(tokens) else None
        if word.lower() in REPEATS and not after and following and not following.group(1):
            times, step = REPEATS[word.lower()], 2
            word, after = following.group(2), following.group(3)
        digit = _digit(word)
        if digit is None or (word.lower() == "o" and not run):
            break
        lead = lead if run else before
        run.append(digit * times)
        tail = after
        j += step
        if after.strip(",.-"):
            break  # "?" "!" ";" ":" close the number
    return run, j, lead, tail
