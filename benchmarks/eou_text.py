"""Can the words alone tell a mid-turn pause from the end of a turn? The LLM's own answer.

For every clip of the corpus sets, the offline Whisper transcript of the audio up to each
pause inside the speech (``pauses`` / ``internal_pauses_ge_300ms`` in the manifests; pauses
in the first 0.4 s are clicks before the first word, skipped) and of the whole clip. Each
transcript is put in the chat template as an unfinished user message after a short system
prompt, and the model's probability of its end-of-message token next is read off the logits:
the text end-of-turn signal of issue 20 (one forward pass over the transcript). Reported: how
many pauses score at or over each threshold (would be cut) and how many complete turns score
under it (would wait), and the seconds per judgement.

    .venv/bin/python -m benchmarks.eou_text --model models/smollm2-135m/*.gguf \
        [--sets main pauses phone short] [--out runs/bench_eou_text.json]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr
from faster_whisper import WhisperModel
from llama_cpp import Llama

from benchmarks.results import write_json
from tests.support.clips import CORPUS

ROOT = Path(__file__).resolve().parents[1]
RATE = 16000
CLICK_SECS = 0.4
SYSTEM = "You are a helpful phone assistant."
THRESHOLDS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5)


def transcripts(whisper: WhisperModel, sets: list[str]) -> list[dict]:
    """One row per pause prefix ("mid") and per whole clip ("end")."""
    rows = []
    for name in sets:
        for line in (CORPUS / name / "manifest.jsonl").read_text().splitlines():
            clip = json.loads(line)
            audio, rate = sf.read(CORPUS / name / clip["file"], dtype="float32")
            audio = soxr.resample(audio, rate, RATE) if rate != RATE else audio

            def text(samples: np.ndarray) -> str:
                padded = np.concatenate([samples, np.zeros(RATE // 2, np.float32)])
                segments, _ = whisper.transcribe(padded, beam_size=1, temperature=0)
                return " ".join(s.text.strip() for s in segments).strip()

            start = (clip.get("speech_span_s") or [0.0])[0]
            for pause_start, _ in clip.get("pauses") or clip.get("internal_pauses_ge_300ms") or []:
                if pause_start - start >= CLICK_SECS:
                    prefix = text(audio[: int(pause_start * RATE)])
                    rows.append({"set": name, "file": clip["file"], "kind": "mid", "text": prefix})
            rows.append({"set": name, "file": clip["file"], "kind": "end", "text": text(audio)})
    return rows


def end_probability(llm: Llama, end_token: int, text: str) -> float:
    """P(end of the user's message | the transcript so far), from the next-token logits."""
    prompt = f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{text}"
    tokens = llm.tokenize(prompt.encode(), add_bos=False, special=True)
    llm.reset()
    llm.eval(tokens)
    logits = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm.n_vocab(),)).astype(float)
    p = np.exp(logits - logits.max())
    return float(p[end_token] / p.sum())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True, help="a GGUF with a ChatML template")
    parser.add_argument("--whisper", type=Path, default=ROOT / "models" / "whisper-tiny.en")
    parser.add_argument("--sets", nargs="+", default=["main", "pauses", "phone", "short"])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    whisper = WhisperModel(str(args.whisper), device="cpu", compute_type="int8")
    rows = [r for r in transcripts(whisper, args.sets) if r["text"]]
    llm = Llama(model_path=str(args.model), n_ctx=512, n_threads=args.threads, verbose=False)
    (end_token,) = llm.tokenize(b"<|im_end|>", add_bos=False, special=True)
    started = time.perf_counter()
    for row in rows:
        row["p_end"] = round(end_probability(llm, end_token, row["text"]), 4)
    secs = (time.perf_counter() - started) / len(rows)
    mids = [r["p_end"] for r in rows if r["kind"] == "mid"]
    ends = [r["p_end"] for r in rows if r["kind"] == "end"]
    print(f"{args.model.name}: {len(mids)} pauses, {len(ends)} complete turns, "
          f"{secs * 1000:.0f} ms per judgement")  # fmt: skip
    print("threshold  pauses cut  complete turns kept waiting")
    for t in THRESHOLDS:
        cut = sum(p >= t for p in mids)
        waiting = sum(p < t for p in ends)
        print(f"{t:9}  {cut:3} / {len(mids)}   {waiting:3} / {len(ends)}")
    if args.out:
        write_json(args.out, {"secs_per_judgement": secs, "rows": rows})


if __name__ == "__main__":
    main()
