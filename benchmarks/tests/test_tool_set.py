"""Judging a tool conversation set: which calls a turn needed against those made, and what
an answer states that no tool, document or caller gave."""

from __future__ import annotations

from pathlib import Path

from benchmarks.conversation_set import (
    Turn,
    call_verdict,
    load_conversations,
    load_tool_set,
    unsupported,
)

SET = Path(__file__).resolve().parents[2] / "tests" / "data" / "restaurant_tools.yaml"
CHECK = {"tool": "check_availability", "args": {"date": "2026-12-12", "time": "19:00"}}


def test_a_call_needs_the_right_tool_and_the_listed_arguments():
    turn = Turn(user="a table at 7?", calls=[CHECK])
    right = {"tool": "check_availability",
             "args": {"date": "2026-12-12", "time": "19:00", "party_size": 2}}  # fmt: skip
    assert call_verdict(turn, [right]) == "right"  # party_size not listed: any will do
    assert call_verdict(turn, [{**right, "args": {**right["args"], "time": "14:00"}}]) == "wrong"
    assert call_verdict(turn, [{"tool": "book_table", "args": right["args"]}]) == "wrong"
    assert call_verdict(turn, []) == "missing"
    assert call_verdict(Turn(user="hi", no_call=True), [right]) == "spurious"
    assert call_verdict(Turn(user="hi", no_call=True), []) == "none"
    assert call_verdict(Turn(user="hi"), [right]) is None


def test_an_answer_may_only_state_what_was_given():
    result = '{"booked": true, "reference": "L101", "time": "19:00"}'
    sources = ["Book for two at 7 pm please.", result]
    assert unsupported("You're booked, reference L101, at 7 pm.", sources, [result]) == []
    assert unsupported("Booked for 19:00, see you then.", sources, [result]) == []
    assert unsupported("You're booked, reference L205.", sources, [result]) == ["L205", "205"]
    free = '{"available": true}'
    assert unsupported("Your table is booked.", ["a table?", free], [free]) == ["booked"]
    assert unsupported("We close at 23:00.", ["when do you close?"], []) == ["23", "00"]


def test_the_restaurant_set_reads_and_summarises_its_tool_figures():
    conversations = load_conversations(SET)
    turns = [t for c in conversations for t in c.turns]
    assert sum(bool(t.calls) for t in turns) >= 8 and sum(t.no_call for t in turns) >= 7
    assert load_tool_set(SET).today == "2026-12-07"
    assert load_tool_set(SET).env == {"RESTAURANT_DB": "{tmp}/restaurant.db"}
