"""The turn timeline (docs/design.md): event names, stage definitions and the gaps between them."""

from __future__ import annotations

EVENTS = (
    "speech_start",
    "speech_end",
    "turn_end",
    "stt_final",
    "llm_request",
    "retrieval_start",
    "retrieval_end",
    "tool_call",
    "tool_result",
    "filler",
    "llm_first_token",
    "first_phrase",
    "tts_first_audio",
    "first_audio_out",
    "bot_audio_end",
    "interrupted",
)

# stage -> (from event, to event)
STAGES: dict[str, tuple[str, str]] = {
    "endpointing": ("speech_end", "turn_end"),
    "stt_final": ("turn_end", "stt_final"),
    "llm_ttft": ("llm_request", "llm_first_token"),
    "first_phrase": ("llm_first_token", "first_phrase"),
    "tts_ttfb": ("first_phrase", "tts_first_audio"),
    "transport_out": ("tts_first_audio", "first_audio_out"),
    "voice_to_voice": ("speech_end", "first_audio_out"),
    # Inside llm_ttft (not added to voice_to_voice): the knowledge search as the request
    # begins, and the tools' run from the model's first call to the last result (the first
    # token is then the filler's, or the answer's after the tools).
    "retrieval": ("retrieval_start", "retrieval_end"),
    "tool": ("tool_call", "tool_result"),
}

STAGE_NAMES = tuple(STAGES)
# Stages that lie inside others: timed and budgeted, but no part of the sum.
INNER_STAGES = ("retrieval", "tool")
# The stages voice_to_voice is made of (with the gap), in timeline order.
PART_STAGES = tuple(n for n in STAGE_NAMES if n != "voice_to_voice" and n not in INNER_STAGES)
# The order reports list stages in: the number the caller feels first, its parts, the rest.
REPORT_ORDER = ("voice_to_voice", *PART_STAGES, *INNER_STAGES)
# The one orchestration gap: from the final transcript (or turn_end, if later) to the request.
GAP = "stt_to_llm"


def _diff(events: dict[str, float | None], a: str, b: str) -> float | None:
    if events.get(a) is None or events.get(b) is None:
        return None
    return round(events[b] - events[a], 1)


def stages_and_gaps(events: dict[str, float | None]) -> tuple[dict, dict, float | None]:
    """Stage durations, the orchestration gap, and the final transcript's lead over turn_end.

    ``stt_final`` is 0 when the transcript was ready before ``turn_end``; its lead is returned
    separately. The one gap, ``stt_to_llm``, runs from the later of turn_end / stt_final to the
    LLM request (negative when the request is sent speculatively), so that
    endpointing + stt_final + stt_to_llm + llm_ttft + first_phrase + tts_ttfb + transport_out
    equals voice_to_voice exactly.
    """
    stages = {name: _diff(events, a, b) for name, (a, b) in STAGES.items()}
    lead = None
    if stages["stt_final"] is not None and stages["stt_final"] < 0:
        lead = -stages["stt_final"]
        stages["stt_final"] = 0.0
    ready = None
    if events.get("turn_end") is not None and events.get("stt_final") is not None:
        ready = max(events["turn_end"], events["stt_final"])
    gap = None
    if ready is not None and events.get("llm_request") is not None:
        gap = round(events["llm_request"] - ready, 1)
    return stages, {GAP: gap}, lead
