"""The answer's opening hold in tokens: how many tokens an answer's first phrase waits for,
with the phrase chunker alone and through the answer editor, and why the editor held it.

Why: after a turn is confirmed, the first phrase waits for tokens, and each costs a decoding
step (about 60 ms on 2 busy cores). Counting tokens instead of timing them gives the same
figures on any machine. The answers of a conversation run (``benchmarks.conversation``'s
JSON) are cut into the default model's tokens and fed, in order, through the shipped editor
(each conversation's earlier answers as what was said before) and chunker.

    .venv/bin/python -m benchmarks.opening_hold docs/conversation-runs/conv_dec3_notes.json \\
        docs/conversation-runs/corpus_text_dec5_openings.json [--out runs/opening_hold.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent import model_store
from agent.llm.answer import AnswerEditor, _close, _whole_words, normalise, sentences
from agent.settings import Settings
from agent.synthesis.chunker import split_phrase
from agent.timing.budget import rounded_percentile
from benchmarks.results import write_json

FIRST_MIN_WORDS = 2  # tts.first_phrase_min_words' default
PHRASE_MIN_WORDS = 6


def first_phrase_at(pieces: list[str]) -> int:
    """Tokens fed when the chunker cuts the first phrase (all of them, plus one, if never)."""
    text = ""
    for n, piece in enumerate(pieces, 1):
        text += piece
        if split_phrase(text, True, FIRST_MIN_WORDS, PHRASE_MIN_WORDS) is not None:
            return n
    return len(pieces) + 1


def why_held(editor: AnswerEditor, examples: set[str], earlier: set[str]) -> str:
    """What holds the editor's sentence in progress now (the editor's own tests, in order)."""
    partial = editor._pending
    words, whole = normalise(partial), _whole_words(partial)
    if editor._copies_opening(whole):
        return "opens as a recent answer did"
    if editor._may_open_with_echo(words):
        return "opens with the caller's words"
    for said in editor._said_before():
        if any(len(w) >= 3 and _close(w, said.split()) for w in (whole, words.split())) or (
            said.startswith(words)
        ):
            if said in earlier:
                return "could become an earlier answer's sentence"
            return "could become an example line" if said in examples else "could echo the caller"
    return "other"


def measure(runs: list[Path], tokenize: Callable[[str], list[str]]) -> dict[str, Any]:
    llm = Settings().llm
    examples = [line for e in llm.examples for line in (e.caller, e.answer)]
    example_set = set(map(normalise, examples))
    alone, edited, causes = [], [], Counter()
    for path in runs:
        turns = json.loads(path.read_text())["runs"][0]["turns"]
        said: dict[str, list[str]] = defaultdict(list)
        for turn in turns:
            earlier = said[turn["conversation"]]
            said[turn["conversation"]] = [*earlier, turn["answer"]]
            pieces = tokenize(turn["answer"])
            if not pieces:
                continue
            editor = AnswerEditor([*examples, *earlier], turn["user"], llm.max_sentences,
                                  recent=earlier)  # fmt: skip
            chunker_alone = first_phrase_at(pieces)
            out = []
            for n, piece in enumerate(pieces, 1):
                out.append(editor.feed(piece).text)
                if n == chunker_alone and first_phrase_at(out) > n:
                    earlier_units = {normalise(s) for a in earlier for s in sentences(a)}
                    causes[why_held(editor, example_set, earlier_units)] += 1
            alone.append(chunker_alone)
            edited.append(first_phrase_at(out))

    def figures(values: list[int]) -> dict[str, float]:
        return {"p50": rounded_percentile(values, 50), "p95": rounded_percentile(values, 95),
                "mean": round(statistics.mean(values), 2)}  # fmt: skip

    return {
        "runs": [str(p) for p in runs],
        "turns": len(alone),
        "tokens_chunker_alone": figures(alone),
        "tokens_through_editor": figures(edited),
        "turns_held_longer": sum(e > a for a, e in zip(alone, edited, strict=True)),
        "why_held": dict(causes.most_common()),
    }


def model_tokenizer() -> Callable[[str], list[str]]:
    """The default LLM's tokenizer (its vocabulary only), text -> token pieces."""
    from llama_cpp import Llama

    settings = Settings()
    gguf = model_store.resolve(settings.llm.model, "llm", settings.models_dir)
    vocab = Llama(model_path=str(gguf), vocab_only=True, verbose=False)

    def pieces(text: str) -> list[str]:
        ids = vocab.tokenize(text.encode(), add_bos=False, special=False)
        return [vocab.detokenize([i]).decode(errors="ignore") for i in ids]

    return pieces


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="benchmarks.conversation JSON files")
    parser.add_argument("--out", type=Path, default=Path("runs/opening_hold.json"))
    args = parser.parse_args(argv)
    missing = [p for p in args.runs if not p.is_file()]
    if missing:
        print(f"opening_hold: {missing[0]} not found: give benchmarks.conversation JSON files",
              file=sys.stderr)  # fmt: skip
        return 2
    result = measure(args.runs, model_tokenizer())
    write_json(args.out, result)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
