"""Conversation benchmark: the scripted calls of tests/data/conversations.yaml through the LLM
stage (text in, the spoken answer out), per model, engine and decoding variant.

Reports per run: answers that meet their check, repeated answers, loops inside an answer,
echoes of the caller, answers over two sentences, words per answer, time to first token and
to the first phrase handed to synthesis (p50/p95, from the request: no prefill while the
caller speaks), and decoding speed. Per-turn answers go to the JSON file too.

    .venv/bin/python -m benchmarks.conversation --out runs/conversation.json \\
        [--models smollm2-135m qwen2.5-coder-0.5b] [--engines llama-inprocess llama-server] \\
        [--variant name:repeat_penalty=1.0] [--url http://host:8000/v1 --url-model NAME] \\
        [--baseline] [--conversations facts small_talk] [--corpus MANIFEST ...]

``--variant NAME:key=value,...`` overrides llm settings for one run (repeatable; default: the
settings as they are; ``system_prompt=@FILE`` reads the text from a file; a list is JSON,
``examples=[]``). ``--baseline``
adds a run of the stage as it was before the answer editor (old system prompt, temperature
0.2, no penalty, no sentence stop, no history filter) for comparison, in-process only.
``--set FILE --config AGENT.yaml`` runs another set with an agent of your own (its llm
and tools settings, its documents): a tool set's turns say which calls they need
(``calls: [{tool, args}]``) or that none belongs (``no_call: true``), and the run reports
right tool with right arguments, wrong or missing calls, calls where none belonged, and
answers that state what no tool, document or caller gave (the set's ``today:`` fixes the
date, its ``env:`` is set per conversation, "{tmp}" a fresh folder: a clean database).
``--corpus MANIFEST ...`` runs corpus reference transcripts instead, each manifest as one
call with no checks: speech the set was not written for (mostly statements, not
questions), judged for repeats, loops, echoes and fallback lines. Engine ``openai`` needs
``--url``; ``vllm`` needs scripts/setup_vllm.sh.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from agent import model_store
from agent.llm.engines.chat import ChatEngine, Sampling, Usage
from agent.pipeline import llm_engine
from agent.settings import LLMSettings, Settings, load_settings
from agent.tools.knowledge import Knowledge
from benchmarks.conversation_set import (
    CONVERSATIONS,
    Conversation,
    ToolSet,
    Turn,
    TurnResult,
    as_dicts,
    judged,
    load_conversations,
    load_tool_set,
    summarise,
    talk,
)
from benchmarks.results import write_json

# The stage before issue 22, for --baseline.
OLD_SYSTEM_PROMPT = (
    "You are a helpful phone assistant. The caller's words come from speech recognition. "
    "Respond with a short, natural spoken reply (one or two sentences) that adds something "
    "new; do not echo what they said. Plain words only, no lists, markdown or emoji."
)


def parse_variant(spec: str) -> tuple[str, dict[str, Any]]:
    name, _, pairs = spec.partition(":")
    fields = LLMSettings.model_fields
    overrides: dict[str, Any] = {}
    for pair in filter(None, pairs.split(",")):
        key, _, value = pair.partition("=")
        if key not in fields:
            raise SystemExit(f"--variant {spec}: {key} is not an llm setting")
        if value.startswith("@"):  # a text setting read from a file (a system prompt)
            value = Path(value[1:]).read_text().strip()
        default = getattr(LLMSettings(), key)
        overrides[key] = json.loads(value) if isinstance(default, list) else type(default)(value)
        if isinstance(overrides[key], str) and "{bot_name}" in overrides[key]:
            overrides[key] = overrides[key].replace("{bot_name}", LLMSettings().bot_name)
    return name, overrides


@contextmanager
def open_engine(
    kind: str, model: str, s: LLMSettings, settings: Settings, args
) -> Iterator[ChatEngine]:
    """The agent's own engine of that kind (``llm_engine``), answering with ``model``."""
    if kind == "openai":
        if not args.url:
            raise SystemExit("engine openai needs --url")
        s = s.model_copy(update={"base_url": args.url, "model": args.url_model or model})
    with llm_engine(settings.model_copy(update={"llm": s})) as engine:
        yield engine


async def _tokens(engine: ChatEngine, messages: list[dict], s: LLMSettings) -> AsyncIterator[str]:
    async for item in engine.stream(
        messages, max_tokens=s.max_tokens, sampling=Sampling(temperature=0.2)
    ):
        if not isinstance(item, Usage):
            yield item


async def baseline_talk(
    conversation: Conversation, engine: ChatEngine, s: LLMSettings
) -> list[TurnResult]:
    """The stage before issue 22: the model's whole answer, all of it kept in the history."""
    history: list[dict] = []
    results: list[TurnResult] = []
    for i, turn in enumerate(conversation.turns, 1):
        history.append({"role": "user", "content": turn.user})
        kept = history[-(2 * s.history_turns + 1) :]
        start, first, text = time.perf_counter(), None, ""
        async for token in _tokens(engine, [{"role": "system", "content": OLD_SYSTEM_PROMPT},
                                            *kept], s):  # fmt: skip
            first = first or time.perf_counter()
            text += token
        answer = " ".join(text.split())
        history.append({"role": "assistant", "content": answer})
        earlier = [r.answer for r in results]
        ttft = round(1000 * ((first or start) - start), 1)
        results.append(
            judged(
                conversation.name,
                i,
                turn,
                answer,
                earlier,
                s.bot_name,
                s.set_lines,
                ttft_ms=ttft,
            )
        )
    return results


def print_row(label: str, summary: dict[str, Any]) -> None:
    tokens = summary["first_phrase_tokens"]
    if "tool_turns" in summary:
        print(
            f"{label:<52} tools: right {summary['right_calls']}/{summary['tool_turns']}  "
            f"wrong {summary['wrong_calls']}  missing {summary['missing_calls']}  "
            f"spurious {summary['spurious_calls']}/{summary['no_call_turns']}  "
            f"unsupported answers {summary['unsupported_answers']}",
            flush=True,
        )
    print(
        f"{label:<52} checks {summary['checks_met']}/{summary['turns']}  "
        f"repeats {summary['repeated_answers']}  loops {summary['loops']}  "
        f"echoes {summary['echoes']}  fallbacks {summary['fallbacks']}  "
        f">2 sent {summary['over_two_sentences']}  "
        f"words {summary['words_per_answer']}  ttft p50/p95 {summary['ttft_ms']['p50']}/"
        f"{summary['ttft_ms']['p95']}  first phrase p50/p95 "
        f"{summary['first_phrase_ms']['p50']}/{summary['first_phrase_ms']['p95']} "
        f"({tokens['p50']}/{tokens['p95']} tokens)  "
        f"tok/s {summary['tokens_per_s']}",
        flush=True,
    )


def corpus_call(manifest: Path) -> Conversation:
    """A corpus's reference transcripts as one unchecked call, in the manifest's order."""
    rows = [json.loads(line) for line in manifest.read_text().splitlines() if line.strip()]
    return Conversation(name=manifest.parent.name, turns=[Turn(user=r["text"]) for r in rows])


@contextmanager
def conversation_env(tool_set: ToolSet) -> Iterator[None]:
    """The tool set's environment for one conversation ("{tmp}": a fresh folder)."""
    with tempfile.TemporaryDirectory(prefix="conversation-") as tmp:
        saved = {k: os.environ.get(k) for k in tool_set.env}
        os.environ.update({k: v.replace("{tmp}", tmp) for k, v in tool_set.env.items()})
        try:
            yield
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


async def run(args: argparse.Namespace) -> dict[str, Any]:
    settings = load_settings(args.config)
    tool_set = load_tool_set(args.set) if not args.corpus else ToolSet()
    tools = settings.tools
    if tool_set.today:
        tools = tools.model_copy(update={"today": tool_set.today})
    knowledge = Knowledge(tools.knowledge_dir) if tools.knowledge_dir else None
    args.models = args.models or ([settings.llm.model] if args.config else all_llms())
    conversations = [corpus_call(m) for m in args.corpus] or load_conversations(args.set)
    if args.conversations:
        conversations = [c for c in conversations if c.name in args.conversations]
    variants = [parse_variant(v) for v in args.variant] or [("default", {})]
    runs: list[dict[str, Any]] = []
    for model in args.models:
        for kind in args.engines:
            base = settings.llm.model_copy(update={"model": model, "engine": kind})
            with open_engine(kind, model, base, settings, args) as engine:
                arms = [(n, o, False) for n, o in variants]
                if args.baseline and kind == "llama-inprocess":
                    arms.append(("baseline", {}, True))
                for name, overrides, old in arms:
                    s = LLMSettings.model_validate(base.model_dump() | overrides)
                    results: list[TurnResult] = []
                    for conversation in conversations:
                        if old:
                            results += await baseline_talk(conversation, engine, s)
                            continue
                        with conversation_env(tool_set):
                            results += await talk(conversation, engine, s, tools, knowledge)
                    summary = summarise(results)
                    label = f"{model} / {kind} / {name}"
                    print_row(label, summary)
                    runs.append({
                        "model": model, "engine": kind, "variant": name, "overrides": overrides,
                        "summary": summary, "turns": as_dicts(results),
                    })  # fmt: skip
                    save(args, conversations, runs)  # a long sweep keeps what it measured
    return save(args, conversations, runs)


def save(args: argparse.Namespace, conversations: list[Conversation], runs: list) -> dict:
    names = [c.name for c in conversations]
    sets = ", ".join(map(str, args.corpus or [args.set]))
    result = {"set": sets, "conversations": names, "runs": runs}
    write_json(args.out, result)
    return result


def all_llms() -> list[str]:
    return [k for k, spec in model_store.MODELS.items() if spec.role == "llm"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="JSON results file")
    parser.add_argument("--models", nargs="+", help="default: the config's model, or all")
    parser.add_argument("--config", type=Path, help="an agent's YAML (llm, tools, documents)")
    parser.add_argument("--engines", nargs="+", default=["llama-inprocess"],
                        choices=["llama-inprocess", "llama-server", "openai", "vllm"])  # fmt: skip
    parser.add_argument("--variant", action="append", default=[])
    parser.add_argument("--baseline", action="store_true")
    parser.add_argument("--set", type=Path, default=CONVERSATIONS)
    parser.add_argument("--conversations", nargs="*")
    parser.add_argument("--corpus", type=Path, nargs="*", default=[],
                        help="corpus manifest.jsonl files, each as one call")  # fmt: skip
    parser.add_argument("--url", help="OpenAI-compatible base URL (engine openai)")
    parser.add_argument("--url-model", help="model id at --url")
    args = parser.parse_args()
    asyncio.run(run(args))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
