"""Replay a corpus (one call, or one call per clip), grade it, and write ``eval.json``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from agent.audio import load_audio
from agent.clock import clock_for
from agent.evaluation.grading import ClipGrade, grade_call
from agent.evaluation.manifest import Clip
from agent.llm.engines.chat import ChatEngine
from agent.pipeline import AgentModels
from agent.replay import replay_call
from agent.settings import Settings
from agent.timing.budget import Budget, EvalLimits, rounded_percentile
from agent.timing.record import TurnRecord, jsonl
from agent.timing.summary import summarize
from agent.transports.g711 import through_phone_line
from agent.transports.replay import ReplayTurn

ANSWER_PROBLEMS = ("empty", "repeated", "repeated_sentence", "loop", "echo")
TALK_OVER_HEARD_MS = 200  # bot audio over the caller's voice a caller surely hears


def _rate(part: int, whole: int) -> float | None:
    return None if whole == 0 else round(part / whole, 4)


def overall(grades: list[ClipGrade], records: list[TurnRecord]) -> dict[str, Any]:
    """The corpus figures: WER, duplicated phrases and stray words, segmentation, cut-offs,
    voice-to-voice, answer sanity."""
    ref_words = sum(g.reference_words for g in grades)
    wer_stream = _rate(sum(g.streaming_errors for g in grades), ref_words)
    wer_offline = _rate(sum(g.offline_errors for g in grades), ref_words)
    v2v = [g.voice_to_voice_ms for g in grades if g.voice_to_voice_ms is not None]
    endpointing = [x for g in grades for x in g.endpointing_ms]
    problems = [p for g in grades for turn in g.answer_problems for p in turn]
    clips = len(grades)
    talk_over = [g.talk_over_ms for g in grades]
    talk_over_turns = [ms for g in grades for ms in g.talk_over_turns_ms]
    over_heard = sum(1 for ms in talk_over if ms > TALK_OVER_HEARD_MS)
    dictated = [g for g in grades if g.digits]
    return {
        "clips": clips,
        "reference_words": ref_words,
        "wer_streaming": wer_stream,
        "wer_offline": wer_offline,
        "wer_gap": None
        if wer_stream is None or wer_offline is None
        else round(wer_stream - wer_offline, 4),
        "duplicated_phrases": sum(len(g.duplicated) for g in grades),
        "stray_words": sum(len(g.stray) for g in grades),
        "turns": sum(g.turns for g in grades),
        "expected_turns": sum(g.expected_turns for g in grades),
        "splits": sum(g.splits for g in grades),
        "clips_split": sum(1 for g in grades if g.splits),
        "split_rate": _rate(sum(1 for g in grades if g.splits), clips),
        "merges": sum(1 for g in grades if g.merged),
        "empty_turns": sum(g.empty_turns for g in grades),
        "cutoffs": sum(len(g.cutoffs) for g in grades),
        "clips_cut_off": sum(1 for g in grades if g.cutoffs),
        "cutoff_rate": _rate(sum(1 for g in grades if g.cutoffs), clips),
        "pauses": sum(g.pauses for g in grades),
        "talk_over": {
            "clips_p50": rounded_percentile(talk_over, 50),
            "clips_p95": rounded_percentile(talk_over, 95),
            "turns_p50": rounded_percentile(talk_over_turns, 50),
            "turns_p95": rounded_percentile(talk_over_turns, 95),
            "clips_over_200ms": over_heard,
            "share_over_200ms": _rate(over_heard, clips),
        },
        "words_lost": sum(g.words_lost for g in grades),
        "clips_losing_words": sum(1 for g in grades if g.words_lost),
        "dictation": {
            "clips": len(dictated),
            "whole": sum(1 for g in dictated if g.dictation_whole),
            "digits": sum(len(g.digits or "") for g in dictated),
            "recalled": sum(g.digits_recalled or 0 for g in dictated),
        },
        "voice_to_voice_callwav": {
            "n": len(v2v),
            "p50": rounded_percentile(v2v, 50),
            "p95": rounded_percentile(v2v, 95),
        },
        "endpointing": {
            "n": len(endpointing),
            "p50": rounded_percentile(endpointing, 50),
            "p95": rounded_percentile(endpointing, 95),
        },
        "answers": {
            "answered": sum(1 for r in records if r.bot_text.strip()),
            **{name: problems.count(name) for name in ANSWER_PROBLEMS},
        },
    }


async def evaluate(
    clips: list[Clip],
    out_dir: Path,
    *,
    settings: Settings,
    models: AgentModels,
    engine: ChatEngine,
    budget: Budget,
    limits: EvalLimits,
    pace: str = "realtime",
    per_clip: bool = False,
    line: str = "wideband",
) -> dict[str, Any]:
    """Replay and grade every clip; writes ``eval.json`` (and each call's files) to out_dir.

    ``line="phone"``: every clip goes through the phone bridge's codec (8 kHz mu-law and our
    resamplers) first, and the call runs with the phone line's settings, as a phone call would.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    rate = settings.sample_rate
    heard = through_phone_line if line == "phone" else (lambda x: x)
    if line == "phone":
        settings = settings.for_phone()
    turns = [ReplayTurn(str(c.path), heard(load_audio(c.path, rate))) for c in clips]
    offline = [models.decoder.offline(t.samples.astype(np.float32) / 32768.0) for t in turns]
    if per_clip:
        groups = [[i] for i in range(len(clips))]
        folders = [out_dir / "calls" / f"{i + 1:03d}-{c.path.stem}" for i, c in enumerate(clips)]
    else:
        groups, folders = [list(range(len(clips)))], [out_dir]
    grades: list[ClipGrade] = []
    records: list[TurnRecord] = []
    for group, folder in zip(groups, folders, strict=True):
        result = await replay_call(
            [turns[i] for i in group], folder, settings=settings, models=models,
            engine=engine, budget=budget, clock=clock_for(pace),
        )  # fmt: skip
        grades += grade_call(
            folder / "call.wav",
            [clips[i] for i in group],
            result.played,
            result.records,
            [offline[i] for i in group],
        )
        records += result.records
    figures = overall(grades, records)
    summary = summarize(records, budget)
    latency = summary["violations"] if pace == "realtime" else []
    violations = limits.check(figures) + latency
    report = {
        "pace": pace,
        "per_clip": per_clip,
        "line": line,
        "asr_model": settings.asr.model,
        "llm_model": settings.llm.model,
        "overall": figures,
        "stages": summary["stages"],
        "limits": limits.model_dump(),
        "violations": violations,
        "verdict": "pass" if not violations else "fail",
        "clips": [g.as_dict() for g in grades],
    }
    (out_dir / "eval.json").write_text(json.dumps(report, indent=2) + "\n")
    if per_clip:  # one turns.jsonl over every call, so `voice-agent report` reads the run
        numbered = [r.model_copy(update={"turn": n}) for n, r in enumerate(records, 1)]
        (out_dir / "turns.jsonl").write_text(jsonl(numbered))
    return report
