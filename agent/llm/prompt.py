"""Prompt layout for prefix caching: static system prompt, short history, new user text last.

The system prompt is byte-identical every turn, so the engine prefills it once. History is
trimmed in whole user/assistant pairs, and in steps of half the limit, so the cached prefix
is broken only every few turns rather than on every turn once the limit is reached.
"""

from __future__ import annotations

from typing import Any

Message = dict[str, Any]


def prompt_messages(system_prompt: str, history: list[Message], max_pairs: int) -> list[Message]:
    """The request's messages: system prompt, then the kept tail of ``history``.

    ``history`` alternates user/assistant and ends with the new user message.
    """
    turns = [m for m in history if m.get("role") in ("user", "assistant")]
    *earlier, latest = turns
    pairs = len(earlier) // 2
    if pairs > max_pairs:
        step = max(1, max_pairs // 2)
        dropped = -(-(pairs - max_pairs) // step) * step  # whole steps, so the prefix holds
        earlier = earlier[2 * min(pairs, dropped) :]
    return [{"role": "system", "content": system_prompt}, *earlier, latest]


def prefix_after_trim(
    system_prompt: str, history: list[Message], answer: str, max_pairs: int
) -> list[Message] | None:
    """The next turn's prompt up to its (still unknown) user text, when trimming will change
    it: its oldest kept message differs from this turn's. None when the cached prefix holds.
    """
    now = prompt_messages(system_prompt, history, max_pairs)
    after = [*history, {"role": "assistant", "content": answer}, {"role": "user", "content": ""}]
    upcoming = prompt_messages(system_prompt, after, max_pairs)
    return upcoming if upcoming[1] is not now[1] else None
