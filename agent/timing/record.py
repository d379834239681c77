"""The turn record: the one definition of what a turn writes to ``turns.jsonl``.

The timer builds it, a live call adds ``barge_in_ms`` to it, and reports, tracing, the eval
and the command line read its attributes; only files (and the browser's events) hold it as
JSON. Its event, stage and gap names come from ``agent.timing.timeline``, so a record cannot
name what the timeline does not define.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainValidator,
    StrictBool,
    StrictInt,
    StrictStr,
    field_serializer,
    field_validator,
    model_serializer,
)
from pydantic_core import PydanticCustomError

from agent.timing.critical_path import PathStep
from agent.timing.timeline import EVENTS, GAP, STAGE_NAMES

Verdict = Literal["pass", "fail"]


def _number(what: str) -> Callable[[Any], float | None]:
    """A validator that keeps a JSON number as it is (an int stays an int on the way back)."""

    def check(value: Any) -> float | None:
        if value is None or (isinstance(value, int | float) and not isinstance(value, bool)):
            return value
        raise PydanticCustomError("number_or_null", f"must be {what} or null")

    return check


# int before float: a whole number read from a file is written back without a ".0".
Ms = Annotated[int | float | None, PlainValidator(_number("a number of ms"))]
Number = Annotated[int | float | None, PlainValidator(_number("a number"))]


def _keyed_by(names: tuple[str, ...], what: str, *, fill: bool) -> BeforeValidator:
    """An object keyed by timeline names only; with ``fill``, every name, null when missing."""

    def check(value: Any) -> Any:
        if not isinstance(value, dict):
            raise PydanticCustomError("object", f"must be an object of {what} name -> value")
        unknown = [k for k in value if k not in names]
        if unknown:
            raise PydanticCustomError(
                "unknown_name",
                f"unknown {what} {', '.join(map(repr, unknown))} (known: {', '.join(names)})",
            )
        return {n: value.get(n) for n in names} if fill else dict(value)

    return BeforeValidator(check)


Events = Annotated[dict[str, Ms], _keyed_by(EVENTS, "event", fill=True)]
Stages = Annotated[dict[str, Ms], _keyed_by(STAGE_NAMES, "stage", fill=True)]
Gaps = Annotated[dict[str, Ms], _keyed_by((GAP,), "gap", fill=True)]
Verdicts = Annotated[dict[str, Verdict | None], _keyed_by(STAGE_NAMES, "stage", fill=False)]


class LLMUsage(BaseModel):
    """Token accounting of the answer; counts are coerced, since a server's quirk (95.0)
    must not stop the timer in a live call."""

    model_config = ConfigDict(extra="forbid")

    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    completion_tokens: int | None = None
    itl_ms: Ms = None
    speculative: StrictBool = False
    speculation_misses: int = 0


class TurnRecord(BaseModel):
    """One turn of the record contract (docs/design.md), fields in the file's key order.

    A file needs only ``turn``, ``events``, ``stages`` and ``voice_to_voice_ms`` (older and
    hand-made runs still read); ``barge_in_ms`` is written only once set, since a replay has
    no barge-ins to measure and its files never carried the key; ``critical_path`` likewise,
    only from a run with a CPU profile (``benchmarks.cpu_profile``).
    """

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    turn: StrictInt
    input: StrictStr | None = None
    user_text: StrictStr = ""
    bot_text: StrictStr = ""
    spoken_text: StrictStr = ""
    events: Events
    stages: Stages
    gaps: Gaps = Field(default_factory=lambda: {GAP: None})
    stt_lead_ms: Ms = None
    voice_to_voice_ms: Ms
    llm: LLMUsage | None = None  # None: no usage reported; written as {}
    budget: Verdicts = Field(default_factory=dict)
    interrupted: StrictBool = False
    turn_end_reason: StrictStr | None = None
    turn_end_value: Number = None
    turn_end_words: Number = None  # the LLM's P(the caller's message ended there)
    turn_end_goes_on: Number = None  # recognition's P(a comma where it closed the words)
    turn_end_text: StrictStr = ""  # the words that decision read (before any revision)
    last_interim_text: StrictStr = ""  # recognition's last interim of the turn, if any
    errors: list[StrictStr] = Field(default_factory=list)
    barge_in_ms: Ms = None
    critical_path: list[PathStep] | None = None  # with a CPU profile only

    @field_validator("llm", mode="before")
    @classmethod
    def _empty_llm(cls, value: Any) -> Any:
        return None if value == {} else value

    @field_serializer("llm")
    def _llm_out(self, llm: LLMUsage | None) -> dict[str, Any]:
        return {} if llm is None else llm.model_dump()

    @model_serializer(mode="wrap")
    def _out(self, handler: Callable[[TurnRecord], dict[str, Any]]) -> dict[str, Any]:
        data = handler(self)
        for optional in ("barge_in_ms", "critical_path"):
            if optional not in self.model_fields_set:
                data.pop(optional, None)
        return data

    def json_line(self) -> str:
        """The record as one ``turns.jsonl`` line (json.dumps spacing, as always written)."""
        return json.dumps(self.model_dump(mode="json")) + "\n"


def jsonl(records: Iterable[TurnRecord]) -> str:
    """The text of a ``turns.jsonl`` file."""
    return "".join(r.json_line() for r in records)
