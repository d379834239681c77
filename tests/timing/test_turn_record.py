"""The typed turn record: what the timer builds is what turns.jsonl holds and load_run reads
back, unchanged; a bad record is one line naming the field. No models: milliseconds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pipecat.frames.frames import InterimTranscriptionFrame, TranscriptionFrame
from pipecat.observers.base_observer import FramePushed
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor

from agent.clock import ComputeClock
from agent.errors import UserError
from agent.frames import TimelineEventFrame, TranscriptRevisionFrame, TurnEndReasonFrame
from agent.live.call import with_barge_in
from agent.reports.load import load_run
from agent.timing.budget import Budget, default_budget_file, load_budget
from agent.timing.record import LLMUsage, jsonl
from agent.timing.timeline import EVENTS, GAP, STAGE_NAMES
from agent.timing.turn_timer import Turn, TurnTimer
from tests.support.fakes import scripted_run

# The record contract's keys, in the order turns.jsonl has always had them (docs/design.md).
CONTRACT_KEYS = [
    "turn", "input", "user_text", "bot_text", "spoken_text", "events", "stages", "gaps",
    "stt_lead_ms", "voice_to_voice_ms", "llm", "budget", "interrupted", "turn_end_reason",
    "turn_end_value", "turn_end_words", "turn_end_goes_on", "turn_end_text",
    "last_interim_text", "errors",
]  # fmt: skip


@pytest.fixture(scope="module")
def budget() -> Budget:
    return load_budget(default_budget_file(), None)


def timed_turn(number: int = 1, llm: LLMUsage | None = None) -> Turn:
    """A turn as the timer holds it, with every event of an answered turn."""
    turn = Turn(number, f"clip{number}.wav", " What time is it? ", "It is  noon.", "It is noon.")
    at = 500.0 * number
    for event in EVENTS:
        if event != "interrupted":
            turn.events[event] = at
            at = round(at + 37.3, 1)
    turn.llm, turn.errors = llm, ["tts: RuntimeError: x"]
    turn.end_reason, turn.end_value = "smart_turn", 0.93
    return turn


def write(run: Path, lines: list[str]) -> Path:
    run.mkdir(exist_ok=True)
    (run / "turns.jsonl").write_text("".join(line + "\n" for line in lines))
    return run


def test_a_timer_record_round_trips_through_json_and_load_run(tmp_path, budget) -> None:
    usage = LLMUsage(prompt_tokens=95, cached_tokens=89, completion_tokens=31, itl_ms=11.2)
    records = [timed_turn(1, usage).record(budget), timed_turn(2).record(budget)]
    run = tmp_path / "run"
    run.mkdir()
    (run / "turns.jsonl").write_text(jsonl(records))
    assert load_run(run) == records
    assert jsonl(load_run(run)) == (run / "turns.jsonl").read_text()  # byte for byte
    first, second = (json.loads(line) for line in (run / "turns.jsonl").read_text().splitlines())
    assert list(first) == CONTRACT_KEYS  # no barge_in_ms: a replay never sets it
    assert list(first["events"]) == list(EVENTS) and list(first["stages"]) == list(STAGE_NAMES)
    assert list(first["gaps"]) == [GAP] and list(first["budget"]) == list(budget.stages)
    assert first["llm"] == usage.model_dump() and second["llm"] == {}
    assert records[1].llm is None and first["user_text"] == "What time is it?"


def test_a_scripted_run_reads_back_unchanged(tmp_path, budget) -> None:
    run = scripted_run(tmp_path / "run", budget)
    assert jsonl(load_run(run)) == (run / "turns.jsonl").read_text()


def test_barge_in_is_written_once_a_live_call_sets_it(tmp_path, budget) -> None:
    cut, next_turn = timed_turn(1), timed_turn(2)
    cut.events["interrupted"] = next_turn.events["speech_start"] + 120.0  # type: ignore[operator]
    records = with_barge_in([cut.record(budget), next_turn.record(budget)])
    assert [r.barge_in_ms for r in records] == [120.0, None]
    run = write(tmp_path / "call", jsonl(records).splitlines())
    lines = [json.loads(x) for x in (run / "turns.jsonl").read_text().splitlines()]
    assert [x["barge_in_ms"] for x in lines] == [120.0, None]
    assert jsonl(load_run(run)) == (run / "turns.jsonl").read_text()


def test_missing_stages_and_events_read_as_null_and_whole_numbers_stay_whole(tmp_path) -> None:
    line = {"turn": 1, "events": {"speech_end": 100}, "stages": {"voice_to_voice": 450},
            "voice_to_voice_ms": 450}  # fmt: skip
    [record] = load_run(write(tmp_path / "run", [json.dumps(line)]))
    assert list(record.stages) == list(STAGE_NAMES) and record.stages["llm_ttft"] is None
    assert list(record.events) == list(EVENTS) and record.events["turn_end"] is None
    dumped = record.model_dump(mode="json")
    assert dumped["stages"]["voice_to_voice"] == 450
    assert isinstance(dumped["voice_to_voice_ms"], int)


def good_line(budget: Budget) -> dict[str, Any]:
    return timed_turn().record(budget).model_dump(mode="json")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda r: r["stages"].update(llm_ttft="fast"), "stages.llm_ttft: must be a number of ms"),
        (lambda r: r["events"].update(turn_end=True), "events.turn_end: must be a number of ms"),
        (lambda r: r.pop("stages"), "stages: the turn record lacks it"),
        (lambda r: r.update(stages={"llm_speed": 5.0}), "stages: unknown stage 'llm_speed'"),
        (lambda r: r.update(turn="one"), "turn: Input should be a valid integer"),
        (lambda r: r["budget"].update(voice_to_voice="ok"), "budget.voice_to_voice: Input"),
        (lambda r: r.update(mood="calm"), "mood: Extra inputs are not permitted"),
    ],
)
def test_a_bad_record_is_one_line_naming_the_field(tmp_path, budget, change, message) -> None:
    bad = good_line(budget)
    change(bad)
    run = write(tmp_path / "run", [json.dumps(good_line(budget)), json.dumps(bad)])
    with pytest.raises(UserError) as caught:
        load_run(run)
    text = str(caught.value)
    assert "\n" not in text and text.startswith(f"{run / 'turns.jsonl'} line 2: {message}"), text


def test_a_line_that_is_no_record_says_what_it_lacks(tmp_path) -> None:
    run = write(tmp_path / "run", ['{"turn": 9}'])
    with pytest.raises(UserError, match=r"line 1: events, stages, voice_to_voice_ms: the turn "
                       r"record lacks them \(not a replay run\?\)$"):  # fmt: skip
        load_run(run)
    write(run, ["[1, 2]"])
    with pytest.raises(UserError, match="line 1: a turn record must be a JSON object, got list"):
        load_run(run)


async def test_words_heard_again_replace_the_earlier_turns_words_in_their_records():
    """A turn that went on from two before it heard their words again: those two records
    take the words heard now; a revision of words they do not end with changes nothing. What
    each turn's end read stays as it was read."""
    timer = TurnTimer(ComputeClock())
    source = FrameProcessor()

    async def push(frame) -> None:
        pushed = FramePushed(source, source, frame, FrameDirection.DOWNSTREAM, 0, True)
        await timer.on_push_frame(pushed)

    said = ["Please take the shape", "of a long round arch.", "with its path"]
    for i, text in enumerate(said):
        await push(TimelineEventFrame(event="speech_start", at_ms=1000.0 * i))
        await push(TurnEndReasonFrame(reason="smart_turn", value=0.9, words=0.4, text=text))
        await push(TimelineEventFrame(event="turn_end", at_ms=1000.0 * i + 500))
        await push(TranscriptionFrame(text=text, user_id="caller", timestamp=""))
    await push(TimelineEventFrame(event="speech_start", at_ms=4000.0))  # the open turn
    await push(TranscriptRevisionFrame(turns=[("no such words", "other words")]))
    assert [r.user_text for r in timer.records()] == [*said, ""]
    revised = [
        ("of a long round arch.", "of a long round arch,"),
        ("with its path", "with its path high"),
    ]
    await push(TranscriptRevisionFrame(turns=revised))
    records = timer.records()
    assert [r.user_text for r in records] == [
        "Please take the shape", "of a long round arch,", "with its path high", "",
    ]  # fmt: skip
    assert [r.turn_end_text for r in records] == [*said, ""]


async def test_each_record_keeps_its_turn_s_last_interim():
    """The last interim of a turn, beside its final: what a grader compares to count words
    recognition lost at the end of the turn."""
    timer = TurnTimer(ComputeClock())
    source = FrameProcessor()

    async def push(frame) -> None:
        pushed = FramePushed(source, source, frame, FrameDirection.DOWNSTREAM, 0, True)
        await timer.on_push_frame(pushed)

    for i, (interims, final) in enumerate([(["2 2", "2 2 4 1 5"], "2 2 4"), ([], "hello")]):
        await push(TimelineEventFrame(event="speech_start", at_ms=1000.0 * i))
        for text in interims:
            await push(InterimTranscriptionFrame(text=text, user_id="caller", timestamp=""))
        await push(TimelineEventFrame(event="turn_end", at_ms=1000.0 * i + 500))
        await push(TranscriptionFrame(text=final, user_id="caller", timestamp=""))
    records = timer.records()
    assert [r.last_interim_text for r in records] == ["2 2 4 1 5", ""]
    assert [r.user_text for r in records] == ["2 2 4", "hello"]
