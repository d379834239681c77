"""Text made speakable before synthesis: no markdown, URLs or emoji; numbers said as words."""

from __future__ import annotations

import re

from num2words import num2words

ABBREVIATIONS = {
    "e.g.": "for example",
    "i.e.": "that is",
    "etc.": "et cetera",
    "Dr.": "Doctor",
    "Mr.": "Mister",
    "Mrs.": "Missus",
    "Ms.": "Miz",
    "St.": "Saint",
    "vs.": "versus",
    "approx.": "approximately",
}
CURRENCIES = {"$": "dollars", "€": "euros", "£": "pounds"}

_CODE_FENCE = re.compile(r"```.*?(```|$)", re.S)
_URL = re.compile(r"https?://\S+|www\.\S+")
_MARKUP = re.compile(r"[*_#`>|~\[\]]+")
_BULLET = re.compile(r"^\s*(?:[-•]|\d+[.)])\s+", re.M)
_EMOJI = re.compile(
    "[\U0001f000-\U0001faff\U00002600-\U000027bf\U0001f1e6-\U0001f1ff\ufe0f\u200d\ufffd]"
)
_TIME = re.compile(r"\b(\d{1,2}):(\d{2})\b")
_MONEY = re.compile(r"([$€£])\s?(\d+(?:[.,]\d+)?)")
_PERCENT = re.compile(r"(\d+(?:\.\d+)?)\s?%")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def _say_number(text: str) -> str:
    try:
        return num2words(float(text) if "." in text else int(text))
    except (ValueError, OverflowError):
        return text


def _say_time(m: re.Match) -> str:
    hours, minutes = int(m.group(1)), int(m.group(2))
    if minutes == 0:
        return f"{num2words(hours)} o'clock"
    spoken = num2words(minutes) if minutes >= 10 else f"oh {num2words(minutes)}"
    return f"{num2words(hours)} {spoken}"


def _say_money(m: re.Match) -> str:
    amount = m.group(2).replace(",", ".")
    return f"{_say_number(amount)} {CURRENCIES[m.group(1)]}"


def speakable(text: str) -> str:
    """What the voice should say for ``text`` (English)."""
    text = _CODE_FENCE.sub(" ", text)
    text = _URL.sub("a link", text)
    text = _BULLET.sub("", text)
    text = _MARKUP.sub("", text)
    text = _EMOJI.sub("", text)
    for short, long in ABBREVIATIONS.items():
        text = text.replace(short, long)
    text = _TIME.sub(_say_time, text)
    text = _MONEY.sub(_say_money, text)
    text = _PERCENT.sub(lambda m: f"{_say_number(m.group(1))} percent", text)
    text = _NUMBER.sub(lambda m: _say_number(m.group(0)), text)
    return " ".join(text.split())
