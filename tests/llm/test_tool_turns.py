"""Tool turns in the LLM stage, with a scripted engine (a fake that yields tool calls) and
Python tools that take the call's time: the result goes back to the model, a slow tool gets
a filler line, a barge-in books nothing twice, a failing tool becomes a sentence, a side
effect waits for the turn to be confirmed, and the documents' passages reach the prompt."""

from __future__ import annotations

from pathlib import Path

from pipecat.frames import frames as pf
from pipecat.pipeline.pipeline import Pipeline
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.tests.utils import SleepFrame

from agent import frames as af
from agent.clock import ComputeClock
from agent.llm.service import StreamingLLM
from agent.settings import LLMSettings, ToolSpec, ToolsSettings
from agent.tools.knowledge import Knowledge
from agent.tools.runner import ToolCall
from tests.support.compute_pace import run_paced
from tests.support.fakes import InterruptAtFirstToken, ScriptedToolEngine

LLM = LLMSettings(keepalive_secs=0, speculate=True)
ARGS = {"date": "2026-12-12", "time": "19:00", "party_size": 2}
BOOKINGS: list[dict] = []
CLOCK: list[ComputeClock] = []  # the test's call clock: a slow tool takes the call's time


async def check_availability(date: str, time: str, party_size: int) -> dict:
    await CLOCK[0].sleep(0.1)
    return {"available": True, "date": date, "time": time, "party_size": party_size}


async def slow_book(date: str, time: str, party_size: int) -> dict:
    await CLOCK[0].sleep(2.0)  # the booking system takes two seconds
    BOOKINGS.append({"date": date, "time": time, "party_size": party_size})
    return {"reference": f"R{len(BOOKINGS)}"}


def broken(date: str, time: str, party_size: int) -> dict:
    raise ConnectionError("booking system down")


def tool(name: str, function: str, **extra) -> ToolSpec:
    params = {"type": "object", "properties": {k: {"type": "string"} for k in ARGS}}
    return ToolSpec(name=name, description=name, parameters=params,
                    python=f"{__name__}:{function}", **extra)  # fmt: skip


TOOLS = ToolsSettings(
    functions=[
        tool("check_availability", "check_availability"),
        tool("book_table", "slow_book", side_effect=True),
        tool("broken", "broken", error_message="I couldn't reach the {name} system."),
    ],
    filler_after_ms=700,
    filler_lines=["Let me check that for you."],
)


def ask(text: str) -> pf.LLMContextFrame:
    return pf.LLMContextFrame(context=LLMContext(messages=[{"role": "user", "content": text}]))


def stage(engine: ScriptedToolEngine, **kwargs) -> tuple[StreamingLLM, ComputeClock]:
    clock = ComputeClock()
    CLOCK[:] = [clock]
    return StreamingLLM(engine, LLM, clock, tools=kwargs.pop("tools", TOOLS), **kwargs), clock


def texts(down: list) -> str:
    return "".join(f.text for f in down if isinstance(f, pf.LLMTextFrame))


def events(down: list) -> dict[str, float]:
    return {f.event: f.at_ms for f in down if isinstance(f, af.TimelineEventFrame)}


async def test_the_tools_result_goes_back_to_the_model_and_its_answer_is_spoken():
    engine = ScriptedToolEngine(
        [ToolCall("check_availability", ARGS, "call_0")], "Yes, we have a table at seven."
    )
    llm, clock = stage(engine)
    down, _ = await run_paced(
        llm, frames_to_send=[ask("A table for two at 7 pm?"), SleepFrame(sleep=0.5)], clock=clock
    )
    assert texts(down) == "Yes, we have a table at seven."  # a quick tool: no filler
    first, second = engine.requests
    assert second[: len(first)] == first
    call, result, note = second[len(first) :]
    assert note["role"] == "system" and "tell the caller" in note["content"]
    assert call["tool_calls"][0]["function"] == {
        "name": "check_availability", "arguments": '{"date": "2026-12-12", "time": "19:00", '
        '"party_size": 2}'
    }  # fmt: skip
    assert result["role"] == "tool" and result["tool_call_id"] == "call_0"
    assert '"available": true' in result["content"]
    timeline = events(down)
    assert timeline["tool_result"] - timeline["tool_call"] == 100.0  # the tool's 0.1 s
    assert "filler" not in timeline


async def test_a_slow_tool_gets_the_filler_line_then_the_answer():
    BOOKINGS.clear()
    engine = ScriptedToolEngine(
        [ToolCall("book_table", ARGS, "call_0")], "You're booked, reference R1."
    )
    llm, clock = stage(engine)
    down, _ = await run_paced(
        llm, frames_to_send=[ask("Book it please."), SleepFrame(sleep=3.0)], clock=clock
    )
    assert texts(down) == "Let me check that for you. You're booked, reference R1."
    timeline = events(down)
    assert timeline["filler"] - timeline["tool_call"] == 700.0
    assert timeline["tool_result"] - timeline["tool_call"] == 2000.0
    assert BOOKINGS == [ARGS]


async def test_a_barge_in_during_a_tool_call_stops_the_answer_and_books_nothing_twice():
    BOOKINGS.clear()
    call = ToolCall("book_table", ARGS, "call_0")
    engine = ScriptedToolEngine([call], [call], "Yes, your booking is R1.")
    llm, clock = stage(engine)
    barge_in = InterruptAtFirstToken()  # the caller talks over the filler line
    down, _ = await run_paced(
        Pipeline([llm, barge_in]),
        frames_to_send=[
            ask("Book it please."),
            SleepFrame(sleep=3.0),  # the booking system answers after the barge-in
            ask("Hello? Did you book it?"),
            SleepFrame(sleep=0.1),
        ],
        clock=clock,
    )
    assert barge_in.done
    assert texts(down) == "Let me check that for you. Yes, your booking is R1."
    assert BOOKINGS == [ARGS]  # asked again with the same arguments: booked once
    assert len(engine.requests) == 3  # the answer to the first result was never asked for
    assert "R1" in engine.requests[-1][-2]["content"]  # the result, before the note


async def test_a_failing_tool_is_a_sentence_the_model_can_say():
    engine = ScriptedToolEngine(
        [ToolCall("broken", ARGS, "call_0")], "Sorry, I couldn't reach the booking system."
    )
    llm, clock = stage(engine)
    down, _ = await run_paced(llm, frames_to_send=[ask("Book it.")], clock=clock)
    assert engine.requests[1][-2]["content"] == "I couldn't reach the broken system."
    assert texts(down) == "Sorry, I couldn't reach the booking system."


async def test_several_calls_of_one_answer_run_together():
    calls = [
        ToolCall("check_availability", ARGS, "call_0"),
        ToolCall("check_availability", {**ARGS, "time": "20:00"}, "call_1"),
    ]
    engine = ScriptedToolEngine(calls, "Both are free.")
    llm, clock = stage(engine)
    down, _ = await run_paced(
        llm, frames_to_send=[ask("Seven or eight?"), SleepFrame(sleep=0.5)], clock=clock
    )
    results = [m for m in engine.requests[1] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in results] == ["call_0", "call_1"]
    assert '"20:00"' in results[1]["content"]
    timeline = events(down)
    assert timeline["tool_result"] - timeline["tool_call"] == 100.0  # side by side, not 200


async def test_a_side_effect_waits_for_the_turn_to_be_confirmed():
    BOOKINGS.clear()
    call = ToolCall("book_table", ARGS, "call_0")
    engine = ScriptedToolEngine([call], [call], "You're booked, reference R1.")
    llm, clock = stage(engine)
    turn = [{"role": "user", "content": "Book it please."}]
    down, _ = await run_paced(
        llm,
        frames_to_send=[
            af.SpeculativeTurnFrame(messages=turn),  # the pause: the answer starts
            SleepFrame(sleep=0.5),
            pf.TextFrame(text="turn confirmed"),
            pf.LLMContextFrame(context=LLMContext(messages=list(turn))),
            SleepFrame(sleep=3.0),
        ],
        clock=clock,
    )
    marker = next(i for i, f in enumerate(down) if type(f) is pf.TextFrame)
    assert not any(isinstance(f, pf.LLMTextFrame) for f in down[:marker])
    assert BOOKINGS == [ARGS] and len(engine.requests) == 3
    assert texts(down).endswith("You're booked, reference R1.")


async def test_passages_for_the_callers_words_follow_them_in_the_prompt(tmp_path: Path):
    (tmp_path / "parking.md").write_text("# Parking\n\nFree parking behind the restaurant.")
    (tmp_path / "hours.md").write_text("# Hours\n\nOpen from noon to ten.")
    engine = ScriptedToolEngine("You can park behind the restaurant.")
    llm, clock = stage(engine, knowledge=Knowledge(tmp_path))
    down, _ = await run_paced(llm, frames_to_send=[ask("Where can I park?")], clock=clock)
    (request,) = engine.requests
    assert request[-2] == {"role": "user", "content": "Where can I park?"}
    assert request[-1]["role"] == "system"
    assert request[-1]["content"].endswith("\nParking: Free parking behind the restaurant.")
    assert {"retrieval_start", "retrieval_end"} <= set(events(down))


async def test_today_in_the_system_prompt_is_the_calls_date():
    engine = ScriptedToolEngine("Hello.")
    llm = LLM.model_copy(update={"system_prompt": "Today is {today}."})
    clock = ComputeClock()
    stage_ = StreamingLLM(
        engine, llm, clock, tools=TOOLS.model_copy(update={"today": "2026-12-07"})
    )
    await run_paced(stage_, frames_to_send=[ask("Hi.")], clock=clock)
    assert engine.requests[0][0]["content"] == "Today is 2026-12-07, Monday."


async def test_after_the_last_round_or_a_call_made_again_the_model_must_answer_in_words():
    call = ToolCall("check_availability", ARGS, "call_0")
    engine = ScriptedToolEngine([call], [call], "There is a table at seven.")
    llm, clock = stage(engine)
    down, _ = await run_paced(
        llm, frames_to_send=[ask("A table at 7?"), SleepFrame(sleep=0.5)], clock=clock
    )
    assert engine.calls_allowed == [True, True, False]  # the same call again: time to answer
    assert texts(down) == "There is a table at seven."
    one_round = TOOLS.model_copy(update={"max_rounds": 1})
    engine = ScriptedToolEngine([call], "There is a table at seven.")
    llm, clock = stage(engine, tools=one_round)
    await run_paced(llm, frames_to_send=[ask("A table at 7?"), SleepFrame(sleep=0.5)], clock=clock)
    assert engine.calls_allowed == [True, False]
