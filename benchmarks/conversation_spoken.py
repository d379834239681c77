"""The conversation set, spoken: every caller turn synthesised once with Piper's voice and the
calls replayed through the whole pipeline (recognition, turn-taking, the LLM stage, synthesis),
graded with the same checks as the text run.

The speech is synthesised, not human: the report says so. It tests what the text run cannot,
that an answer survives what recognition hears and when the turn ends, on a voice the
recogniser finds easy, so its WER says little about callers (the corpus eval does that).

    .venv/bin/python -m benchmarks.conversation_spoken --out runs/conv_spoken \\
        [--pace compute|realtime] [--conversations facts say_again] [--llm-model NAME]

The speech is written once under ``--speech`` (default ``runs/conversation-speech``) and
reused, so runs compare on the same audio; ``eval.json`` and the call files of each
conversation go under ``--out``, with ``conversation.json`` (every answer, graded).
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf

from agent.evaluation.manifest import load_manifest
from agent.evaluation.run import evaluate
from agent.pipeline import AgentModels, llm_engine
from agent.replay import paced_settings
from agent.settings import LLMSettings, Settings
from agent.synthesis.piper_tts import PiperVoiceModel
from agent.timing.budget import load_budget, load_eval_limits, rounded_percentile
from benchmarks import conversation_set as cs
from benchmarks.conversation import print_row
from benchmarks.conversation_set import Conversation, TurnResult

LEAD_SECS, TAIL_SECS = 0.3, 0.6  # silence around each synthesised turn, as a recording has
SPEECH_LABEL = "synthesised speech (Piper)"
CALL_FIGURES = ("wer_streaming", "wer_offline", "turns", "splits", "cutoffs")


def synthesise(conversation: Conversation, voice: PiperVoiceModel, folder: Path, rate: int) -> Path:
    """The conversation's manifest, its turns synthesised into ``folder`` unless already there
    with the same words."""
    folder.mkdir(parents=True, exist_ok=True)
    manifest = folder / "manifest.jsonl"
    rows = [{"file": f"{i:02d}.wav", "text": t.user} for i, t in enumerate(conversation.turns, 1)]
    lines = "".join(json.dumps(row) + "\n" for row in rows)
    if manifest.is_file() and manifest.read_text() == lines:
        return manifest
    for row in rows:
        speech = voice.synthesize(row["text"], rate)
        lead, tail = (np.zeros(int(s * rate), dtype=np.int16) for s in (LEAD_SECS, TAIL_SECS))
        sf.write(folder / row["file"], np.concatenate([lead, speech, tail]), rate)
    manifest.write_text(lines)
    return manifest


def graded(
    conversation: Conversation, report: dict[str, Any], persona: LLMSettings
) -> list[TurnResult]:
    """The eval's answers, one per caller turn, judged as the text run judges them."""
    results: list[TurnResult] = []
    for i, (turn, clip) in enumerate(zip(conversation.turns, report["clips"], strict=True), 1):
        answer = " ".join(a for a in clip["answers"] if a.strip())
        earlier = [r.answer for r in results]
        results.append(
            cs.judged(
                conversation.name, i, turn, answer, earlier, persona.bot_name,
                persona.set_lines,
            )
        )  # fmt: skip
    return results


async def run(args: argparse.Namespace) -> dict[str, Any]:
    settings = Settings()
    if args.llm_model:
        settings = settings.model_copy(
            update={"llm": settings.llm.model_copy(update={"model": args.llm_model})}
        )
    settings = paced_settings(settings, args.pace)
    conversations = cs.load_conversations(args.set)
    if args.conversations:
        conversations = [c for c in conversations if c.name in args.conversations]
    budget = load_budget(settings.budget_file, settings.budget_profile)
    limits = load_eval_limits(settings.budget_file)
    rate = settings.sample_rate
    voice = PiperVoiceModel.from_settings(settings.tts, settings.models_dir)
    manifests = {c.name: synthesise(c, voice, args.speech / c.name, rate) for c in conversations}
    models = AgentModels.load(settings)
    results: list[TurnResult] = []
    calls: dict[str, Any] = {}
    errors = words = 0
    v2v: list[float] = []  # from call.wav: each clip's speech end -> the bot's next onset
    with llm_engine(settings) as engine:
        for c in conversations:
            report = await evaluate(
                load_manifest(manifests[c.name]), args.out / c.name, settings=settings,
                models=models, engine=engine, budget=budget, limits=limits, pace=args.pace,
            )  # fmt: skip
            results += graded(c, report, settings.llm)
            v2v += [x["voice_to_voice_ms"] for x in report["clips"] if x["voice_to_voice_ms"]]
            errors += sum(x["streaming_errors"] for x in report["clips"])
            words += sum(x["reference_words"] for x in report["clips"])
            calls[c.name] = {k: report["overall"][k] for k in CALL_FIGURES}
    summary = cs.summarise(results) | {
        "speech": SPEECH_LABEL,
        "wer_streaming": round(errors / words, 4) if words else None,
        "splits": sum(c["splits"] for c in calls.values()),
        "cutoffs": sum(c["cutoffs"] for c in calls.values()),
        "voice_to_voice_callwav": {
            "n": len(v2v),
            "p50": rounded_percentile(v2v, 50),
            "p95": rounded_percentile(v2v, 95),
        },
    }
    print_row(f"{settings.llm.model} / spoken ({SPEECH_LABEL}, {args.pace})", summary)
    v = summary["voice_to_voice_callwav"]
    print(f"  splits {summary['splits']}  cut-offs {summary['cutoffs']}  "
          f"streaming WER {summary['wer_streaming'] or 0:.1%}  "
          f"voice-to-voice (call.wav) p50 {v['p50']} / p95 {v['p95']} ms")  # fmt: skip
    out = {
        "speech": SPEECH_LABEL, "pace": args.pace, "model": settings.llm.model,
        "summary": summary, "calls": calls, "turns": cs.as_dicts(results),
    }  # fmt: skip
    (args.out / "conversation.json").write_text(json.dumps(out, indent=2) + "\n")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--speech", type=Path, default=Path("runs/conversation-speech"))
    parser.add_argument("--set", type=Path, default=cs.CONVERSATIONS)
    parser.add_argument("--pace", choices=["compute", "realtime"], default="compute")
    parser.add_argument("--conversations", nargs="*")
    parser.add_argument("--llm-model", help="llm.model for this run (default: the setting)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
