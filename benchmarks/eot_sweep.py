"""End of turn on the corpus: every stop traced once, every policy swept over the traces.

Trace (once per clip): the agent's VAD (Silero with the turn settings) hears the clip frame
by frame, then ``TAIL_SECS`` of silence. At each stop (the VAD's first silent window after
speech, where the turn detector asks Smart Turn) Smart Turn's probability is read over the
turn so far (from ``SMART_TURN_LEAD_SECS`` before its speech start, at most 8 s) at the stop
and at each offset of ``OFFSETS`` while the silence lasts, and the
turn's words so far come from one pass of the agent's decoder over the turn's audio up to the
stop (what recognition's pause pass reads, with its probability of a comma where it closed
them, ``Pass.goes_on``), and the default LLM's probability that a
caller's message ends after those words (``InProcessLlama.end_of_message`` after the
persona's opening, what the LLM stage sends the detector at a pause). A stop followed by
speech in the same clip is a mid-turn pause (the VAD's resumption ends it); the clip's last
stop is its true end.

A policy maps one stop's trace to the silence after which it ends the turn (None: the
silence fallback, ``max_silence_secs``). Per policy and setting: mid-turn pauses cut (and
clips talked over), endpointing p50/p95 at the true ends (speech end in the manifest ->
stop + delay), and ends that waited for the fallback. Judging time is not counted (compute
pace); the live detector judges at the stop, so its verdict is ready by then.

    .venv/bin/python -m benchmarks.eot_sweep [--sets pauses main short] [--line phone] \
        [--out runs/eot_sweep.json] [--plot docs/eot_curve.png]
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
from pipecat.audio.vad.vad_analyzer import VADState

from agent import model_store
from agent.audio import load_audio
from agent.llm.engines.chat import InProcessLlama
from agent.recognition.whisper_decoder import RATE, WhisperDecoder
from agent.settings import Settings
from agent.timing.budget import rounded_percentile
from agent.transports.g711 import through_phone_line
from agent.turns.detector import REJUDGE_SECS
from agent.turns.options import VadOptions
from agent.turns.pipecat_compat import smart_turn_probability
from agent.turns.policy import EndOfTurnPolicy
from agent.turns.smart_turn import SMART_TURN_LEAD_SECS, SMART_TURN_MAX_SECS
from agent.turns.vad import SharedSileroVAD, TurnModels
from agent.turns.words import ends_sentence
from benchmarks.results import write_json
from tests.support.clips import CORPUS

FRAME = RATE * 20 // 1000
TAIL_SECS = 2.0
# Silence after the stop at which Smart Turn is read (s): the default stop window, then where
# the detector judges again.
OFFSETS = (Settings().turn.vad_stop_secs, *REJUDGE_SECS)


@dataclass
class Stop:
    """One silence after speech: when it began and ended, and what the signals said in it."""

    clip: str
    at_s: float  # the VAD's first silent window, clip time
    silence_s: float  # until speech resumed (or the end of the audio)
    mid: bool  # speech followed in the same clip
    speech_end_s: float  # the clip's true speech end (manifest)
    text: str  # the turn's words up to the stop
    p_at_stop: float  # Smart Turn at the stop
    p: dict[float, float] = field(default_factory=dict)  # offset -> Smart Turn
    words: float | None = None  # the LLM: P(the message ends after ``text``)
    goes_on: float | None = None  # recognition: P(a comma where it closed ``text``)


async def trace_clip(
    path: Path, clip: dict, line: str, models: TurnModels, decoder: WhisperDecoder, s: Settings
) -> list[Stop]:
    samples = load_audio(path, RATE)
    if line == "phone":
        samples = through_phone_line(samples)
    samples = np.concatenate([samples, np.zeros(int(TAIL_SECS * RATE), np.int16)])
    t = s.turn
    vad = SharedSileroVAD.for_turns(models.silero, VadOptions.from_settings(t), RATE)
    state = VADState.QUIET
    turn_start: int | None = None
    stops: list[tuple[int, int | None, int]] = []  # (stop sample, resume sample, turn start)
    heard_from = 0  # where Smart Turn's window begins: the turn's speech start and lead-in
    for i in range(0, len(samples) - FRAME + 1, FRAME):
        previous, state = state, await vad.analyze_audio(samples[i : i + FRAME].tobytes())
        if state == previous:
            continue
        if state == VADState.SPEAKING:
            if stops and stops[-1][1] is None:
                stops[-1] = (stops[-1][0], i, stops[-1][2])
            if turn_start is None:
                turn_start = max(0, i - int((t.vad_start_secs + s.asr.pre_roll_ms / 1000) * RATE))
                heard_from = max(0, i - int((t.vad_start_secs + SMART_TURN_LEAD_SECS) * RATE))
        elif state == VADState.STOPPING and turn_start is not None:
            stops.append((i + FRAME, None, turn_start))
    await vad.cleanup()
    speech_end = clip["speech_span_s"][1]
    traced = []
    for n, (at, resumed, start) in enumerate(stops):
        end = resumed if resumed is not None else len(samples)

        def smart_turn(offset: float, at: int = at, end: int = end) -> float:
            upto = min(end, at + int(offset * RATE))
            window = samples[max(heard_from, upto - SMART_TURN_MAX_SECS * RATE) : upto]
            probability = smart_turn_probability(
                models.smart_turn, window.astype(np.float32) / 32768.0
            )
            return round(probability, 4)

        silence = (end - at) / RATE
        heard = decoder.transcribe(samples[start:at].astype(np.float32) / 32768.0, goes_on=True)
        traced.append(
            Stop(
                clip=clip["file"], at_s=round(at / RATE, 3), silence_s=round(silence, 3),
                mid=n < len(stops) - 1, speech_end_s=speech_end,
                text=heard.text.strip(), goes_on=heard.goes_on, p_at_stop=smart_turn(0.0),
                p={o: smart_turn(o) for o in OFFSETS if o < silence},
            )
        )  # fmt: skip
    return traced


def trace(sets: list[str], line: str, settings: Settings) -> list[Stop]:
    models = TurnModels.load()
    decoder = WhisperDecoder.from_settings(settings.asr, settings.models_dir)
    stops: list[Stop] = []
    for name in sets:
        for row in (CORPUS / name / "manifest.jsonl").read_text().splitlines():
            clip = json.loads(row)
            path = CORPUS / name / clip["file"]
            found = asyncio.run(trace_clip(path, clip, line, models, decoder, settings))
            for stop in found:
                stop.clip = f"{name}/{stop.clip}"
            stops += found
    return stops


def judge_words(stops: list[Stop], settings: Settings) -> None:
    """The LLM's end-of-message probability for each stop's words not yet judged."""
    todo = [s for s in stops if s.words is None and s.text.strip()]
    if not todo:
        return
    gguf = model_store.resolve(settings.llm.model, "llm", settings.models_dir)
    engine = InProcessLlama(gguf, settings.llm)

    async def judge() -> None:
        for stop in todo:
            messages = [*settings.llm.opening, {"role": "user", "content": stop.text}]
            words = await engine.end_of_message(messages)
            stop.words = None if words is None else round(words, 4)

    asyncio.run(judge())


# -- policies: a stop's trace -> the silence (s) after which the turn ends, None = fallback --

Policy = Callable[[Stop], float | None]


def vad_only(secs: float) -> Policy:
    return lambda stop: secs


def smart_turn_at(stop_secs: float, lean: float | None, threshold: float = 0.5) -> Policy:
    """Today's detector at another stop window: the verdict at the stop, then one at the
    window; a verdict over ``lean`` ends the turn when the words end a sentence."""

    def decide(stop: Stop) -> float | None:
        later = stop.p.get(stop_secs, _nearest(stop, stop_secs))
        for p in (stop.p_at_stop, later):
            if p >= threshold or (lean is not None and p >= lean and ends_sentence(stop.text)):
                return stop_secs
        return None

    return decide


def text_only(stop_secs: float) -> Policy:
    return lambda stop: stop_secs if ends_sentence(stop.text) else None


def words_only(stop_secs: float, at_least: float) -> Policy:
    """The LLM's end-of-message probability alone, at the stop window."""
    return lambda stop: stop_secs if (stop.words or 0.0) >= at_least else None


def adaptive(policy: EndOfTurnPolicy) -> Policy:
    """The shipped detector's rule (agent.turns.detector.EndOfTurnPolicy)."""

    def decide(stop: Stop) -> float | None:
        for offset in (o for o in OFFSETS if o in stop.p):
            p = max(stop.p[offset], stop.p_at_stop) if offset == OFFSETS[0] else stop.p[offset]
            if policy.verdict(p, offset, stop.text, stop.words, stop.goes_on) is not None:
                return offset
        return None

    return decide


def _nearest(stop: Stop, offset: float) -> float:
    below = [o for o in stop.p if o <= offset]
    return stop.p[max(below)] if below else stop.p_at_stop


def grade(stops: list[Stop], decide: Policy, max_silence: float) -> dict:
    mids = [s for s in stops if s.mid]
    ends = [s for s in stops if not s.mid]
    cut = [s for s in mids if (d := decide(s)) is not None and d < s.silence_s]
    cut += [s for s in mids if decide(s) is None and max_silence < s.silence_s]
    in_pauses = [s for s in mids if s.clip.startswith("pauses/")]
    delays, fallbacks = [], 0
    for s in ends:
        d = decide(s)
        if d is None:
            d, fallbacks = max_silence, fallbacks + 1
        delays.append((s.at_s + d - s.speech_end_s) * 1000)
    clips = {s.clip for s in stops if s.mid}
    return {
        "pauses_cut": len(cut), "pauses": len(mids),
        "pauses_set_cut": sum(s in cut for s in in_pauses), "pauses_set": len(in_pauses),
        "clips_cut": len({s.clip for s in cut}), "clips_with_pauses": len(clips),
        "ends": len(ends), "fallbacks": fallbacks,
        "endpointing_p50_ms": rounded_percentile(delays, 50),
        "endpointing_p95_ms": rounded_percentile(delays, 95),
    }  # fmt: skip


# The rule before the adaptive bar: Smart Turn 0.5, or this with a full stop (phone: 0.05).
BEFORE_LEAN = {"wide": 0.3, "phone": 0.05}
DEFAULT_FAMILY = "adaptive bar + LLM words (default)"
BARS = ((0.5, 0.3), (0.7, 0.5), (0.9, 0.7), (0.97, 0.8), (0.99, 0.9))


def policies(settings: Settings, line: str) -> dict[str, list[tuple[str, Policy]]]:
    shipped = EndOfTurnPolicy.from_settings(settings.turn)
    punctuation = replace(
        shipped, unfinished_below=None, goes_on_above=None, unclosed_go_on=False, one_word_secs=None
    )
    lean = BEFORE_LEAN[line]
    return {
        "VAD only": [(f"silence {x} s", vad_only(x)) for x in (0.3, 0.45, 0.6, 0.75, 0.9, 1.2)],
        "Smart Turn alone": [
            (f"stop {x} s", smart_turn_at(x, lean=None)) for x in (0.15, 0.25, 0.35, 0.45, 0.6)
        ],
        "Smart Turn + punctuation (before)": [
            (f"stop {x} s", smart_turn_at(x, lean=lean)) for x in (0.15, 0.25, 0.35, 0.45, 0.6)
        ],
        "text alone (punctuation)": [(f"stop {x} s", text_only(x)) for x in (0.15, 0.35, 0.6, 0.9)],
        "words alone (LLM)": [
            (f"P(end) >= {x}", words_only(0.15, x)) for x in (0.05, 0.1, 0.2, 0.3, 0.5)
        ],
        "adaptive bar (before: no LLM)": [
            (f"bar {sure} -> {lean}", adaptive(replace(punctuation, sure=sure, lean=lean)))
            for sure, lean in BARS
        ],
        DEFAULT_FAMILY: [
            (f"bar {sure} -> {lean}", adaptive(replace(shipped, sure=sure, lean=lean)))
            for sure, lean in BARS
        ],
        "default bar, LLM words under": [
            (f"P(end) < {x}", adaptive(replace(shipped, unfinished_below=x)))
            for x in (0.02, 0.05, 0.1, 0.2, 0.3)
        ],
        "default, recognition's comma from": [
            (f"P(,) >= {x}" if x else "never", adaptive(replace(shipped, goes_on_above=x)))
            for x in (None, 0.05, 0.1, 0.15, 0.2, 0.3)
        ],
        "default, unclosed words (a comma, no mark)": [
            (label, adaptive(replace(shipped, unclosed_go_on=on)))
            for label, on in (("end like any", False), ("go on", True))
        ],
        "default, a word alone ends after": [
            (f"{x} s" if x else "never", adaptive(replace(shipped, one_word_secs=x)))
            for x in (None, 0.25, 0.35, 0.45, 0.6, 0.75)
        ],
        "default, finished words end after": [
            (f"{x} s" if x else "never", adaptive(replace(shipped, finished_secs=x)))
            for x in (None, 0.45, 0.6, 0.75, 0.9)
        ],
        "default, words finished from": [
            (f"P(end) >= {x}", adaptive(replace(shipped, finished_above=x)))
            for x in (0.1, 0.2, 0.3, 0.5, 0.7)
        ],
    }


def plot(rows: list[dict], path: Path, title: str, default: tuple[str, str]) -> None:
    """Cut-offs against endpointing per policy family; ``default``: the shipped (family,
    setting), starred."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    colours = plt.get_cmap("tab20").colors  # more families than the default cycle's 10
    for ax, pct in zip(axes, ("p50", "p95"), strict=True):
        for i, family in enumerate(dict.fromkeys(r["policy"] for r in rows)):
            mine = [r for r in rows if r["policy"] == family]
            xs = [r[f"endpointing_{pct}_ms"] for r in mine]
            ys = [100 * r["pauses_cut"] / max(1, r["pauses"]) for r in mine]
            ax.plot(xs, ys, marker="os^"[i % 3], color=colours[2 * i % 20 + i // 10],
                    label=family)  # fmt: skip
        for r in rows:
            if (r["policy"], r["setting"]) == default:
                x, y = r[f"endpointing_{pct}_ms"], 100 * r["pauses_cut"] / max(1, r["pauses"])
                ax.plot([x], [y], marker="*", markersize=16, color="black", linestyle="none",
                        label="default" if pct == "p50" else None)  # fmt: skip
        ax.set_xlabel(f"endpointing {pct} at true ends (ms)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("mid-turn pauses cut (%)")
    axes[0].legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", nargs="+", default=["pauses", "main", "short"])
    parser.add_argument("--line", choices=("wide", "phone"), default="wide")
    parser.add_argument("--traces", type=Path, help="reuse the stops of an earlier --out")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--plot", type=Path)
    args = parser.parse_args()
    settings = Settings()
    if args.line == "phone":
        settings = settings.for_phone()
    if args.traces:
        raw = json.loads(args.traces.read_text())["stops"]
        stops = [Stop(**{**r, "p": {float(k): v for k, v in r["p"].items()}}) for r in raw]
    else:
        stops = trace(args.sets, args.line, settings)
    judge_words(stops, settings)
    rows = []
    print(f"{sum(s.mid for s in stops)} mid-turn pauses, {sum(not s.mid for s in stops)} ends")
    print(f"{'policy':36} {'setting':16} {'cut':>8} {'clips':>6} {'pauses/':>8} {'p50':>6} "
          f"{'p95':>6} {'fb':>4}")  # fmt: skip
    for family, settings_list in policies(settings, args.line).items():
        for label, decide in settings_list:
            r = {"policy": family, "setting": label,
                 **grade(stops, decide, settings.turn.max_silence_secs)}  # fmt: skip
            rows.append(r)
            print(f"{family:36} {label:16} {r['pauses_cut']:>3}/{r['pauses']:<4} "
                  f"{r['clips_cut']:>6} {r['pauses_set_cut']:>4}/{r['pauses_set']:<3} "
                  f"{r['endpointing_p50_ms']:>6} "
                  f"{r['endpointing_p95_ms']:>6} {r['fallbacks']:>4}")  # fmt: skip
    if args.out:
        write_json(args.out, {"sets": args.sets, "line": args.line, "rows": rows,
                              "stops": [asdict(s) for s in stops]})  # fmt: skip
    if args.plot:
        t = settings.turn
        default = (DEFAULT_FAMILY, f"bar {t.smart_turn_sure} -> {t.smart_turn_lean}")
        plot(rows, args.plot, f"End of turn on the corpus ({', '.join(args.sets)}; "
             f"{args.line} line): cut-offs against delay", default)  # fmt: skip


if __name__ == "__main__":
    main()
