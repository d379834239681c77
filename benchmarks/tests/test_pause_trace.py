"""The pause trace's arithmetic: what a turn end waited for, measured from the VAD's pause."""

from __future__ import annotations

from benchmarks.pause_trace import turn_ends

WHISPER, SMART, LLAMA = 1, 2, 3


def event(t: float, kind: str, thread: int = 0) -> dict:
    return {"t": t, "kind": kind, "thread": thread}


def test_a_turn_end_is_measured_from_its_last_pause_with_the_work_beside_its_pass():
    events = [
        event(0, "SpeechPausedFrame"),  # a pause the caller spoke on after: not counted
        event(400, "pass_start", WHISPER),  # a stale interim, on the other worker
        event(900, "SpeechLullFrame"),
        event(900, "pass_start", WHISPER + 10),  # the lull's pass
        event(950, "prefill_start", LLAMA),
        event(960, "SpeechPausedFrame"),
        event(960, "smart_start", SMART),
        event(1000, "pass_end", WHISPER),
        event(1010, "smart_end", SMART),
        event(1040, "prefill_end", LLAMA),
        event(1100, "pass_end", WHISPER + 10),
        event(1101, "PauseTranscriptFrame"),
        event(1130, "EndOfMessageFrame"),
        event(1135, "TurnEndReasonFrame"),
    ]
    (row,) = turn_ends(events)
    assert row["turn end"] == 175
    assert row["pause transcript"] == 141
    assert row["words' verdict"] == 170
    assert row["lull before the pause"] == 60
    assert row["pause pass's own time"] == 200
    assert row["another pass beside it"] == 100  # 900-1000
    assert row["Smart Turn beside it"] == 50
    assert row["LLM prefill beside it"] == 90


def test_a_turn_ended_before_any_transcript_has_no_pass_figures():
    events = [event(0, "SpeechPausedFrame"), event(150, "TurnEndReasonFrame")]
    assert turn_ends(events) == [{"turn end": 150}]
