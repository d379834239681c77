from agent.timing.timeline import EVENTS, PART_STAGES, STAGE_NAMES, stages_and_gaps

EVENTS_OK = {
    "speech_start": 812.0, "speech_end": 3120.5, "turn_end": 3330.1, "stt_final": 3371.1,
    "llm_request": 3375.0, "llm_first_token": 3447.3, "first_phrase": 3477.5,
    "tts_first_audio": 3558.5, "first_audio_out": 3563.4, "bot_audio_end": 5000.0,
    "interrupted": None, "retrieval_start": 3373.0, "retrieval_end": 3374.2,
    "tool_call": None, "tool_result": None, "filler": None,
}  # fmt: skip


def test_stage_names_are_the_design_names():
    assert STAGE_NAMES == (
        "endpointing", "stt_final", "llm_ttft", "first_phrase", "tts_ttfb", "transport_out",
        "voice_to_voice", "retrieval", "tool",
    )  # fmt: skip
    assert set(EVENTS_OK) == set(EVENTS)


def test_stages_and_gaps_add_up_to_voice_to_voice():
    stages, gaps, lead = stages_and_gaps(EVENTS_OK)
    parts = [stages[n] for n in PART_STAGES] + list(gaps.values())
    assert round(sum(parts), 1) == stages["voice_to_voice"] == 442.9
    assert lead is None


def test_transcript_ready_before_turn_end_counts_zero_and_keeps_the_lead():
    events = dict(EVENTS_OK, stt_final=3300.0)
    stages, gaps, lead = stages_and_gaps(events)
    assert stages["stt_final"] == 0.0
    assert lead == 30.1
    parts = [stages[n] for n in PART_STAGES] + list(gaps.values())
    assert round(sum(parts), 1) == stages["voice_to_voice"]


def test_missing_events_give_null_stages():
    events = dict.fromkeys(EVENTS_OK)
    events.update(speech_end=100.0, turn_end=300.0)
    stages, gaps, _ = stages_and_gaps(events)
    assert stages["endpointing"] == 200.0
    assert stages["voice_to_voice"] is None and gaps["stt_to_llm"] is None


def test_tool_and_retrieval_are_timed_inside_the_sum():
    """They lie inside llm_ttft and the gap: timed and budgeted, never added twice."""
    events = dict(EVENTS_OK, tool_call=3400.0, tool_result=3900.5)
    stages, gaps, _ = stages_and_gaps(events)
    assert stages["tool"] == 500.5 and stages["retrieval"] == 1.2
    assert "tool" not in PART_STAGES and "retrieval" not in PART_STAGES
    assert round(sum(stages[n] for n in PART_STAGES) + gaps["stt_to_llm"], 1) == 442.9
