"""One Whisper pass over the audio actually present, never padded to 30 s.

faster-whisper's ``transcribe()`` always encodes a 30 s window (about 480 ms for tiny.en on
two cores). CTranslate2 accepts shorter mel windows, so we encode the utterance plus a
little trailing silence, and decode greedily with timestamp tokens. On a short window
Whisper tends to start the utterance over after its end; the timestamps let us cut that
repeat off: segments that begin at the end of the audio, and text from the point where
the utterance starts over, are dropped.

Whisper almost never ends a short window on its own: it starts over, again and again, until
the length limit, so the limit sets a pass's cost. A pass that knows what the previous pass
of the turn found (``expect_tokens``) stops a few tokens past that and the new audio's worth,
just after the restart begins; a pass cut short inside real text is decoded again in full.

For long turns the recogniser commits text and trims the audio it covers; it asks for word
timings (cross-attention alignment) to know where the committed words end. The committed
text is not given back as a decoder prompt: tiny.en copied the prompt (a 36 s turn that says
one sentence 7 times came out with it 10-11 times; 7 without the prompt).

A turn that goes on from the caller's previous one (a pause ended it) is decoded with that
turn's audio before it (``Context``): Whisper, cold at the start of a window, drops or
mishears the first words of a sentence it joins mid-way. Interims force its words as the
text's start; a pass at the end of speech hears both parts again with no word forced, as one
pass over the whole sentence would, and gives the previous part's words as heard now
(``Pass.context_words``) beside the new ones: forced words keep the mistakes the previous
part made without the words that follow it ("Please take the shape" for "These take").
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import ctranslate2
import numpy as np
from faster_whisper import WhisperModel
from faster_whisper.tokenizer import Tokenizer

from agent import model_store
from agent.settings import ASRSettings

# oneDNN, inside CTranslate2, keeps a compiled convolution for every input length it has
# seen (1024 by default). Our windows are unpadded, so nearly every pass has a new length
# and those kernels piled up: about 0.85 MiB a pass, 167 -> 291 MiB over 150 passes of
# random lengths, flat at 171 MiB with a small cache and no slower (lengths rarely repeat).
# Read by oneDNN when it makes its first kernel, so setting it here, before any pass, works.
ONEDNN_CACHED_KERNELS = 16
os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", str(ONEDNN_CACHED_KERNELS))

RATE = 16000
TRAILING_PAD_SECS = 0.5
# Whisper was trained on 30 s windows: on a window barely longer than the speech it starts the
# text over and mishears more; zeros out to 10 s let it close the text (docs/decisions.md).
MIN_WINDOW_SECS: float = ASRSettings.model_fields["min_window_secs"].default
MAX_WINDOW_SECS = 30.0
# Room for about 6 tokens a second of speech (fast speech with timestamps needs 5): CTranslate2
# generates half of max_length (measured: 70 -> 35 tokens), so ask for twice that.
TOKENS_PER_SEC = 12
EXPECT_MARGIN_TOKENS = 6  # past the expected end: room for a restart to show itself
SECS_PER_TIMESTAMP = 0.02
RESUME_AFTER_SECS = 1.5  # a window that stopped this far before the end is resumed
MAX_RESUMES = 2
CLOSING_MARKS = frozenset(".?!")
GOING_ON_MARKS = frozenset((",", ";", ":", "-", "--", "—", "..", "...", "…"))
CHECK_UNCLOSED_SECS = 6.0  # shorter windows rarely stop early; aligning costs a decoder pass
LOOP_MAX_WORDS = 8  # a dictated number loops in groups ("1. 952. 2. 9085. 462." over and over)
DIGIT_LOOP_REPEATS = 5  # a digit said five times over is a loop; three is a number ("555")
MAX_WORDS_PER_SEC = 4.5  # fast English is 3-4 words a second (3.5 cut a real repeat)
LOOP_RETRY_PENALTY = 1.1  # measured: 1.1 undid a loop on a long turn; 1.3 garbled words
# Passes one decoder runs at once (CTranslate2 workers; they share the weights): a call's
# lull or pause pass beside its stale interim, or two calls of one process side by side.
PASSES_AT_ONCE = 2


@dataclass
class Segment:
    start: float
    end: float  # the audio's end when Whisper stopped without a closing timestamp
    tokens: list[int]
    text: str
    closed: bool = True


@dataclass
class Word:
    """One word with its time in the pass's audio (seconds), from the alignment."""

    text: str
    start: float
    end: float

    @property
    def middle(self) -> float:
        """Where the word is said: a word that straddles a cut belongs where most of it is."""
        return (self.start + self.end) / 2


@dataclass
class Pass:
    """The result of one pass: its text, its segments and how much audio it covered.

    ``words`` is filled only when word timings were asked for; it holds the words of ``text``.
    """

    text: str
    audio_secs: float
    segments: list[Segment]
    words: list[Word] = field(default_factory=list)
    restarted: bool = False  # Whisper started the text over: it read the window to its end
    no_speech_prob: float = 0.0  # Whisper's probability that the window holds no speech
    avg_logprob: float = 0.0  # the text's mean token log-probability (Whisper's own measure)
    # the context's words heard again, timed in its audio (None: forced as given)
    context_words: list[Word] | None = None
    # Where Whisper closed the text with a full stop (or "?", "!"): its probability of a mark
    # that goes on there instead (a comma, a dash, an ellipsis), which the voice's pitch and
    # pace sway as well as the words. None: not asked, or the text ends without one.
    goes_on: float | None = None

    @property
    def tokens(self) -> int:
        """Tokens of the kept segments, their two timestamps each included."""
        return sum(len(seg.tokens) + 2 for seg in self.segments)


@dataclass(frozen=True)
class Context:
    """What came before a pass's own audio: the caller's previous words and the audio they
    were heard in, which the window starts with. Their closing punctuation is left off:
    recognition closes every window with a full stop, and a decoder told the sentence ended
    drops the "and" that goes on with it."""

    text: str
    audio: np.ndarray  # float32 16 kHz, up to the pass's own audio

    @property
    def prefix(self) -> str:
        return self.text.strip().rstrip(".?!").strip()


def _words(text: str) -> list[str]:
    return re.sub(r"[^a-z0-9' ]", " ", text.lower()).split()


def _restarts(first: Segment, tail: Segment) -> bool:
    """Whether ``tail``, after a closed segment, starts the window's text over."""
    head, again = _words(first.text), _words(tail.text)
    return len(again) < len(head) and head[: len(again)] == again


def hallucination_cut(words: list[str], secs: float, n: int = 3) -> int | None:
    """Where Whisper starts looping, if it does.

    A run of 1-8 words repeated three times in a row ("ask what you ask what you ask what")
    is a loop; a lone digit only when it comes ``DIGIT_LOOP_REPEATS`` times (a number read
    out says "5 5 5"). The first ``n`` words coming round again is a restart of the
    utterance, but only when there are more words than ``secs`` of speech can hold (a
    caller may well say the same words twice).
    """
    for size in range(1, LOOP_MAX_WORDS + 1):
        for i in range(len(words) - 3 * size + 1):
            run = words[i : i + size]
            times = DIGIT_LOOP_REPEATS if size == 1 and run[0].isdigit() else 3
            if all(words[i + k * size : i + (k + 1) * size] == run for k in range(1, times)):
                return i + size
    if len(words) <= MAX_WORDS_PER_SEC * secs:
        return None
    head = words[:n]
    for i in range(1, len(words) - n + 1):
        if len(head) == n and words[i : i + n] == head:
            return i
    return None


def _shift(done: Pass, secs: float) -> None:
    """Move a pass's times by ``secs`` (from its window's start to its own audio's)."""
    for item in done.segments + done.words:
        item.start, item.end = max(0.0, item.start + secs), max(0.0, item.end + secs)


class WhisperDecoder:
    """A CTranslate2 Whisper model run on short, unpadded windows."""

    def __init__(
        self,
        model_dir: Path,
        *,
        compute_type: str,
        threads: int,
        language: str | None,
        min_window_secs: float = MIN_WINDOW_SECS,
        workers: int = PASSES_AT_ONCE,
    ) -> None:
        self.min_window_secs = min_window_secs
        self.model = WhisperModel(
            str(model_dir),
            device="cpu",
            compute_type=compute_type,
            cpu_threads=threads,
            num_workers=workers,
        )
        multilingual = self.model.model.is_multilingual
        self.tokenizer = Tokenizer(
            self.model.hf_tokenizer,
            multilingual,
            task="transcribe",
            language=(language or "en") if multilingual else "en",
        )
        self._ts_begin = self.tokenizer.timestamp_begin
        self._language = language
        marks = [self.tokenizer.decode([i]).strip() for i in range(self.tokenizer.eot)]
        self._closing_ids = frozenset(i for i, m in enumerate(marks) if m in CLOSING_MARKS)
        self._going_on_ids = [i for i, m in enumerate(marks) if m in GOING_ON_MARKS]

    @classmethod
    def from_settings(cls, asr: ASRSettings, models_dir: Path) -> WhisperDecoder:
        """The decoder the settings name (a default model name or a CTranslate2 folder)."""
        return cls(
            model_store.resolve(asr.model, "asr", models_dir),
            compute_type=asr.compute_type,
            threads=asr.threads,
            language=asr.language,
            min_window_secs=asr.min_window_secs,
        )

    def offline(self, audio: np.ndarray) -> str:
        """faster-whisper's own ``transcribe()`` of any length of float32 16 kHz audio (30 s
        windows, beam search): the yardstick for streaming. Its temperature fallback samples
        at random, so it is off: the same audio gives the same text every time."""
        segments, _ = self.model.transcribe(
            audio, language=self._language, condition_on_previous_text=False, temperature=0.0
        )
        return " ".join(s.text.strip() for s in segments).strip()

    def transcribe(
        self,
        audio: np.ndarray,
        words: bool = False,
        expect_tokens: int | None = None,
        context: Context | None = None,
        beam_size: int = 1,
        hear_context: bool = False,
        goes_on: bool = False,
    ) -> Pass:
        """Transcribe float32 16 kHz audio (at most 30 s with its context).

        ``words`` asks for word timings; ``expect_tokens``, how many tokens the text is
        likely to need (see the module's docstring); ``context``, what the caller said just
        before (its audio is read first, its words forced as the text's start; the result
        holds only the words after them, timed in ``audio``); ``hear_context``: its words are
        not forced but heard again, and given as ``context_words``; ``beam_size``, 1 for
        greedy; ``goes_on``: read ``Pass.goes_on`` (greedy passes only). Whisper sometimes
        stops a long window early; like faster-whisper's own seek loop, decoding then resumes
        from the last segment's end, on the audio that is left.
        """
        secs = len(audio) / RATE
        done = None
        if context is not None and context.prefix and len(context.audio):
            if hear_context:
                done = self._after_context(context, audio, words, expect_tokens, beam_size, goes_on)
            if done is None:
                window = np.concatenate([context.audio, audio])
                done = self._window(
                    window, words, expect_tokens, context.prefix, beam_size, goes_on
                )
                _shift(done, -len(context.audio) / RATE)
            done.audio_secs = secs
        else:
            done = self._window(audio, words, expect_tokens, beam_size=beam_size, goes_on=goes_on)
        for _ in range(MAX_RESUMES):
            if done.restarted or not done.segments:
                break
            if done.segments[-1].end > secs - RESUME_AFTER_SECS:
                break
            offset = done.segments[-1].end
            rest = self._window(
                audio[int(offset * RATE) :], words, beam_size=beam_size, goes_on=goes_on
            )
            if not rest.segments:
                break
            for item in rest.segments + rest.words:
                item.start, item.end = item.start + offset, item.end + offset
            done = Pass(
                text=f"{done.text} {rest.text}".strip(),
                audio_secs=secs,
                segments=done.segments + rest.segments,
                words=done.words + rest.words,
                restarted=rest.restarted,
                no_speech_prob=done.no_speech_prob,
                avg_logprob=done.avg_logprob,
                goes_on=rest.goes_on,
            )
        return done

    def _after_context(
        self,
        context: Context,
        audio: np.ndarray,
        words: bool,
        expect_tokens: int | None,
        beam_size: int,
        goes_on: bool,
    ) -> Pass | None:
        """One pass over the context's audio and ``audio`` with no word forced, split where
        the context's audio ends (by each word's middle); None when the words cannot be
        timed, or none falls in the context, or none after it (Whisper, reading the context
        again, may stop or loop before the new audio): the forced pass decides then."""
        window = np.concatenate([context.audio, audio])
        given = len(self.tokenizer.encode(" " + context.prefix))
        expect = None if expect_tokens is None else expect_tokens + given
        whole = self._window(window, True, expect, beam_size=beam_size, goes_on=goes_on)
        said = whole.text.split()
        if not said or len(whole.words) != len(said):
            return None
        boundary = len(context.audio) / RATE
        timed = [Word(text, w.start, w.end) for text, w in zip(said, whole.words, strict=True)]
        heard = 0
        while heard < len(timed) and timed[heard].middle < boundary:
            heard += 1
        if heard in (0, len(timed)):
            return None
        done = Pass(
            text=" ".join(said[heard:]),
            audio_secs=len(audio) / RATE,
            segments=[seg for seg in whole.segments if seg.end > boundary],
            words=timed[heard:] if words else [],
            restarted=whole.restarted,
            no_speech_prob=whole.no_speech_prob,
            avg_logprob=whole.avg_logprob,
            context_words=timed[:heard],
            goes_on=whole.goes_on,
        )
        _shift(done, -boundary)
        return done

    def _window(
        self,
        audio: np.ndarray,
        words: bool,
        expect_tokens: int | None = None,
        prefix: str = "",
        beam_size: int = 1,
        goes_on: bool = False,
    ) -> Pass:
        """One decode of one unpadded window (``prefix``: its text's forced start, left out
        of the result)."""
        secs = len(audio) / RATE
        window = min(MAX_WINDOW_SECS, max(self.min_window_secs, secs + TRAILING_PAD_SECS))
        padded = np.zeros(int(window * RATE), dtype=np.float32)
        padded[: min(len(audio), len(padded))] = audio[: len(padded)]
        mel = self.model.feature_extractor(padded, padding=0)[:, : int(window * 100)]
        encoded = self.model.model.encode(
            ctranslate2.StorageView.from_array(np.ascontiguousarray(mel[None])), to_cpu=False
        )
        forced = self.tokenizer.encode(" " + prefix) if prefix else []
        # CTranslate2's max_length counts twice the tokens, the forced ones included
        full = int(secs * TOKENS_PER_SEC) + 16 + 2 * len(forced)
        limit = full
        if expect_tokens is not None:
            limit = min(full, 2 * (expect_tokens + len(forced) + EXPECT_MARGIN_TOKENS))
        goes_on = goes_on and beam_size == 1  # a beam's scores are not one distribution a step
        done, looped, cut_short = self._decode(
            encoded, secs, window, 1.0, limit, forced, beam_size, goes_on
        )
        if cut_short and limit < full:  # the expected length was too short for the text
            limit = full
            done, looped, _ = self._decode(
                encoded, secs, window, 1.0, limit, forced, beam_size, goes_on
            )
        if looped:  # greedy tiny models loop ("War, War, War"): retry, discouraging repeats
            retry, still, _ = self._decode(
                encoded, secs, window, LOOP_RETRY_PENALTY, limit, forced, beam_size, goes_on
            )
            if not still or len(retry.text) > len(done.text):
                done = retry
        if words and done.text:
            done.words = self._align(done, encoded, secs, forced)
        last = done.segments[-1] if done.segments else None
        if last is not None and not last.closed and secs >= CHECK_UNCLOSED_SECS:
            # Whisper may stop mid-window without a closing timestamp: the last word's end
            # tells whether audio is left to resume on (it lost a turn's last sentence).
            timed = done.words or self._align(done, encoded, secs, forced)
            if timed:
                last.end = timed[-1].end
        return done

    def _decode(
        self,
        encoded: ctranslate2.StorageView,
        secs: float,
        window: float,
        penalty: float,
        max_length: int,
        forced: list[int],
        beam_size: int,
        goes_on: bool = False,
    ) -> tuple[Pass, bool, bool]:
        """A pass, whether it looped, and whether the length limit cut real text short.

        ``forced``: tokens the text starts with (a context's words); CTranslate2 returns
        them, after the first timestamp, with what it generated. ``goes_on``: read
        ``Pass.goes_on`` off the step that closed the text.
        """
        prompt = list(self.tokenizer.sot_sequence)
        if forced:
            prompt += [self._ts_begin, *forced]
        result = self.model.model.generate(
            encoded,
            [prompt],
            beam_size=beam_size,
            max_length=max_length,
            suppress_blank=True,
            suppress_tokens=[-1],
            repetition_penalty=penalty,
            return_no_speech_prob=True,
            return_scores=True,
            return_logits_vocab=goes_on,
        )
        ids = result[0].sequences_ids[0]
        at_limit = self.tokenizer.eot not in ids and len(ids) >= max_length // 2
        done, looped, cut_short = self.parse_tokens(ids, secs, window, at_limit, len(forced))
        done.no_speech_prob = float(result[0].no_speech_prob)
        # CTranslate2's score is the sum of log-probabilities over the length; faster-whisper
        # counts one token more (the end of text)
        done.avg_logprob = float(result[0].scores[0]) * len(ids) / (len(ids) + 1)
        if goes_on:
            done.goes_on = self._going_on(done.text, ids, result[0].logits[0])
        return done, looped, cut_short

    def _going_on(self, text: str, ids: list[int], steps: list) -> float | None:
        """The probability of a mark that goes on at the step that closed ``text`` (the
        last text token generated, when it is the closing mark the text ends with)."""
        last = max((k for k, t in enumerate(ids) if t < self.tokenizer.eot), default=None)
        if last is None or last >= len(steps) or ids[last] not in self._closing_ids:
            return None
        if not text.endswith(self.tokenizer.decode([ids[last]]).strip()):
            return None  # the closing mark was cut with made-up text
        logits = np.asarray(steps[last], dtype=np.float64).ravel()
        p = np.exp(logits - logits.max())
        return float(p[self._going_on_ids].sum() / p.sum())

    def _align(
        self, done: Pass, encoded: ctranslate2.StorageView, secs: float, forced: list[int]
    ) -> list[Word]:
        """Word timings of the pass's text (faster-whisper's cross-attention alignment),
        aligned after the forced words, which the audio says first."""
        tokens = forced + [t for seg in done.segments for t in seg.tokens]
        aligned = self.model.find_alignment(self.tokenizer, [tokens], encoded, int(secs * 100))
        timed: list[Word] = []
        spelled = len(self.tokenizer.decode(forced))  # characters the forced words take
        for w in aligned[0] if aligned else []:
            if spelled > 0:
                spelled -= len(w["word"])
                continue
            text = w["word"].strip()
            if forced and not timed and not _words(text):
                continue  # punctuation after the forced words, left out of the text too
            if timed and (not _words(text) or not w["word"].startswith(" ")):
                timed[-1].text += text  # "year" + "." is one word of the text, ending at "r"
            elif text:
                timed.append(Word(text, float(w["start"]), float(w["end"])))
        return timed[: len(done.text.split())]

    def parse_tokens(
        self, ids: list[int], secs: float, window: float, at_limit: bool = False, forced: int = 0
    ) -> tuple[Pass, bool, bool]:
        """Segments from timestamp tokens, made-up text dropped; whether a loop was cut; and
        whether the length limit (``at_limit``: decoding stopped there) cut real text.

        The first ``forced`` text tokens were forced (a context's words): they count for the
        checks (a text that starts over repeats them) and are then left out.
        """
        segments: list[Segment] = []
        start, current = 0.0, []
        for tok in ids:
            if tok == self.tokenizer.eot:
                break
            if tok >= self._ts_begin:
                stamp = (tok - self._ts_begin) * SECS_PER_TIMESTAMP
                if current:
                    segments.append(Segment(start, stamp, current, self.tokenizer.decode(current)))
                    current = []
                start = stamp
            else:
                current.append(tok)
        cut_short = restarted = False
        if current:
            tail = Segment(start, secs, current, self.tokenizer.decode(current), closed=False)
            restarted = at_limit and bool(segments) and _restarts(segments[0], tail)
            if not restarted:  # a restart stopped by the limit is made up: dropped
                segments.append(tail)
                cut_short = at_limit
        kept: list[Segment] = []
        for seg in segments:
            if not _words(seg.text) or seg.start >= secs - 0.3:
                continue  # text that starts at the very end is made up
            if seg.end > window:
                # Made up too when its words could not fit in the audio after its start;
                # otherwise only its closing stamp is off (8 kHz phone speech: a whole
                # turn came back stamped 0.0-5.0 s on 3.2 s of audio, and was lost).
                if len(_words(seg.text)) > (secs - seg.start) * MAX_WORDS_PER_SEC:
                    continue
                seg.end = secs
            kept.append(seg)
        text = "".join(seg.text for seg in kept)
        words = text.split()
        cut = hallucination_cut(_words(text), secs)
        if cut is not None and len(_words(text)) == len(words):
            text = " ".join(words[:cut])
        if forced:
            kept, text = self._drop_forced(kept, text, forced)
        done = Pass(text=text.strip(), audio_secs=secs, segments=kept, restarted=restarted)
        return done, cut is not None, cut_short

    def _drop_forced(
        self, kept: list[Segment], text: str, forced: int
    ) -> tuple[list[Segment], str]:
        """The segments and text without the forced words that open the first segment."""
        if not kept or kept[0].start > 0.0 or len(kept[0].tokens) < forced:
            return [], ""  # the forced words were dropped as made up: nothing to trust
        spelled = self.tokenizer.decode(kept[0].tokens[:forced])
        first = kept[0]
        rest = first.tokens[forced:]
        head = [Segment(first.start, first.end, rest, self.tokenizer.decode(rest), first.closed)]
        kept = [seg for seg in head + kept[1:] if seg.tokens]
        # what follows the forced words may open with their punctuation (", and so on")
        return kept, text.strip()[len(spelled.strip()) :].lstrip(" ,.;:!?-")
