"""Prompt layout for prefix caching: static opening, short history, new user text last.

The opening (the system prompt and the persona's example exchanges) is byte-identical every
turn, so the engine prefills it once. History is
trimmed in whole exchanges (a user message and the answer to it), and in steps of half the
limit, so the cached prefix is broken only every few turns rather than on every turn once
the limit is reached.

The model sees only answers worth imitating: an answer that looped, said again what an
earlier answer said, or was the fallback line is left out of the history (its user message
stays, so what the caller said is not lost). A small model copies whatever its history
holds; one bad answer kept there comes back turn after turn. Whether an answer is dropped
depends only on the messages before it, so the kept history is a stable prefix.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from agent.llm.answer import has_loop, normalise, repeats

Message = dict[str, Any]


def degenerate(answer: str, earlier_answers: list[str], dropped_lines: Iterable[str] = ()) -> bool:
    """An answer the model must not see again: empty, looping, repeating, or a set line."""
    words = normalise(answer)
    if not words or any(words == normalise(line) for line in dropped_lines):
        return True
    return has_loop(answer) or repeats(answer, earlier_answers)


def model_history(history: list[Message], dropped_lines: Iterable[str] = ()) -> list[Message]:
    """The user/assistant messages of ``history`` without the degenerate answers."""
    dropped_lines = list(dropped_lines)
    kept: list[Message] = []
    answers: list[str] = []
    for m in history:
        if m.get("role") == "user":
            kept.append(m)
        elif m.get("role") == "assistant":
            text = str(m.get("content") or "")
            if not degenerate(text, answers, dropped_lines):
                kept.append(m)
            answers.append(text)
    return kept


def _exchanges(messages: list[Message]) -> list[list[Message]]:
    """Messages grouped so each group starts at a user message (a greeting stands alone)."""
    groups: list[list[Message]] = []
    for m in messages:
        if m["role"] == "user" or not groups:
            groups.append([m])
        else:
            groups[-1].append(m)
    return groups


def prompt_messages(
    opening: list[Message],
    history: list[Message],
    max_pairs: int,
    dropped_lines: Iterable[str] = (),
) -> list[Message]:
    """The request's messages: the static ``opening``, then the kept tail of ``history``.

    ``history`` ends with the new user message; ``dropped_lines`` are set lines (the
    fallback) that are never shown to the model as its own answers.
    """
    *earlier, latest = model_history(history, dropped_lines)
    exchanges = _exchanges(earlier)
    if len(exchanges) > max_pairs:
        step = max(1, max_pairs // 2)
        dropped = -(-(len(exchanges) - max_pairs) // step) * step  # whole steps: prefix holds
        exchanges = exchanges[min(len(exchanges), dropped) :]
    kept = [m for group in exchanges for m in group]
    return [*opening, *kept, latest]


def prefix_after_trim(
    opening: list[Message],
    history: list[Message],
    answer: str,
    max_pairs: int,
    dropped_lines: Iterable[str] = (),
) -> list[Message] | None:
    """The next turn's prompt up to its (still unknown) user text, when trimming will change
    it: its oldest kept message differs from this turn's. None when the cached prefix holds.
    """
    dropped_lines = list(dropped_lines)
    now = prompt_messages(opening, history, max_pairs, dropped_lines)
    after = [*history, {"role": "assistant", "content": answer}, {"role": "user", "content": ""}]
    upcoming = prompt_messages(opening, after, max_pairs, dropped_lines)
    first = len(opening)  # the oldest kept message (or the user text, when none is kept)
    return upcoming if upcoming[first] is not now[first] else None
