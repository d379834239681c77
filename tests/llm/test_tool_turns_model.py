"""A booking turn end to end with the real in-process model and the example restaurant's
tools: the model calls book_table with the caller's details (decoded under the tools'
grammar), the booking lands in the SQLite database, and the spoken answer says it is
booked and when."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from pipecat.frames import frames as pf
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.tests.utils import SleepFrame

from agent import frames as af
from agent import model_store
from agent.clock import ComputeClock
from agent.llm.engines.chat import InProcessLlama
from agent.llm.service import StreamingLLM, dated
from agent.settings import load_settings
from agent.tools.knowledge import Knowledge
from tests.support.compute_pace import run_paced

pytestmark = pytest.mark.slow

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "restaurant.yaml"


@pytest.fixture(scope="module")
def restaurant(settings):
    agent = load_settings(EXAMPLE, models_dir=settings.models_dir)
    tools = agent.tools.model_copy(update={"today": "2026-12-07"})  # a Monday
    gguf = model_store.resolve(agent.llm.model, "llm", agent.models_dir)
    return agent.llm, tools, InProcessLlama(gguf, dated(agent.llm, tools.today), tools.schemas)


async def test_a_booking_turn_calls_the_tool_and_says_its_reference(
    restaurant, tmp_path, monkeypatch
):
    monkeypatch.chdir(EXAMPLE.parents[1])  # the tools' paths are the checkout's
    monkeypatch.setenv("RESTAURANT_DB", str(tmp_path / "restaurant.db"))
    llm_settings, tools, engine = restaurant
    clock = ComputeClock()
    stage = StreamingLLM(
        engine, llm_settings.model_copy(update={"keepalive_secs": 0}), clock, tools=tools,
        knowledge=Knowledge(Path(tools.knowledge_dir)),
    )  # fmt: skip
    words = (
        "Please book a table for 2 people on 2026-12-12 at 19:00. My name is John Smith "
        "and my phone number is 5551234567."
    )
    ask = pf.LLMContextFrame(context=LLMContext(messages=[{"role": "user", "content": words}]))
    # The call's start prefills the opening (system prompt and tools) first, as live.
    down, _ = await run_paced(stage, frames_to_send=[SleepFrame(sleep=0.1), ask], clock=clock)
    rows = (
        sqlite3.connect(tmp_path / "restaurant.db")
        .execute("SELECT reference, name, phone, date, time, party_size FROM bookings")
        .fetchall()
    )
    assert [row[1:] for row in rows] == [("John Smith", "5551234567", "2026-12-12", "19:00", 2)]
    answer = "".join(f.text for f in down if isinstance(f, pf.LLMTextFrame))
    # The result said: booked, and when. (The 0.5B model leaves the reference out: seen
    # "The tool successfully booked a table for 2 people on 2026-12-12 at 19:00.")
    assert "booked" in answer.lower() and "19:00" in answer, answer
    events = {f.event for f in down if isinstance(f, af.TimelineEventFrame)}
    assert {"tool_call", "tool_result", "retrieval_start", "retrieval_end"} <= events
