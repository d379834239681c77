"""What an answer may say: at most N sentences, no sentence said before, no loop.

Small models fall into two traps on the phone: they say again what they said a turn ago
(greedy decoding makes that a fixed point: the same prompt shape gives the same sentence),
and they repeat a phrase inside one answer until the token limit. Both are checked here,
on the token stream, before anything reaches synthesis:

- a sentence whose words are those of a sentence the bot already said in this call, or of
  the caller's own turn (an echo), is never released: while the sentence so far could still
  become one of those it is held back, so the common case (it diverges at once) costs
  nothing; a full match asks for another answer (``REGENERATE``) when nothing of this answer
  was released yet, and ends the answer otherwise (``STOP``); a held sentence that reads
  the caller back (eight of their words in a row, or, answering a statement, an opening of
  four) is ended there, without decoding the rest of the caller's sentence; an answer to a
  statement is held while its first words are a run of the caller's, so such an opening
  is caught even where it begins no sentence said before;
- a sentence after the first is held to its end and judged whole: the first one's audio
  covers the wait, and a read-back that opens with the model's own words ("Did she have
  her dark suit in greasy wash water all year?") is then left unsaid, not said to its end;
- the answer ends after ``max_sentences`` sentences, at the end of the last one, without
  waiting for the model to stop;
- a phrase that starts repeating itself inside the answer ends it;
- a first sentence that opens with the words one of the last two answers opened with
  ("What kind of gold do you have?" after "What kind of toys do you have?") is held and
  left unsaid, as a repeat is: a small model copies its own last answers' shape into a
  rut that no single sentence repeats.

The same helpers judge the conversation benchmark and the history filter, so what counts
as a repeat, a loop or an echo is defined once.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher
from enum import Enum
from functools import lru_cache

from agent.sentences import sentence_end

# A phrase of this many words said twice in one answer (apart or back to back) is a loop;
# shorter phrases only count back to back ("la France, la France").
LOOP_MIN_WORDS = 4
ECHO_RUN_WORDS = 8
# An answer to a statement that opens with this many of its words in a row reads it back
# (the eval's echo); an answer to a question may open with its words ("The capital of ...").
ECHO_OPEN_WORDS = 4
ECHO_MIN_WORDS = 3  # a caller's sentence this short said back is no echo ("Goodbye.")
SIMILAR = 0.9  # SequenceMatcher ratio over words from which two sentences count as the same
CLAUSE = re.compile(r"[,;:]\s")
MAX_SKIPPED = 2  # sentences left unsaid in one answer before it is ended
# An answer opening with the same words as one of the last few is a template, not a reply.
OPENING_WORDS = 3
RECENT_OPENINGS = 2


@lru_cache(maxsize=4096)
def normalise(text: str) -> str:
    """Lower-case words only: apostrophes dropped ("I'm" -> "im"), other marks as spaces."""
    text = text.lower().replace("'", "").replace("\u2019", "")
    return " ".join(re.sub(r"[^a-z0-9]+", " ", text).split())


@lru_cache(maxsize=1024)
def sentences(text: str) -> tuple[str, ...]:
    """``text`` cut at sentence ends, as the stream is cut (the last one may lack its mark)."""
    parts, rest = [], text
    while (end := sentence_end(rest)) is not None:
        parts.append(rest[:end].strip())
        rest = rest[end:]
    if rest.strip():
        parts.append(rest.strip())
    return tuple(p for p in parts if normalise(p))


@lru_cache(maxsize=8192)
def similar(a: str, b: str) -> bool:
    """Two sentences say the same words (normalised), give or take a word or two.

    Cached: the history filter compares every answer of a call with the earlier ones on
    every request."""
    wa, wb = normalise(a).split(), normalise(b).split()
    if not wa or not wb:
        return False
    if wa == wb:
        return True
    short, long = sorted((len(wa), len(wb)))
    if short < 4 or short < 0.8 * long:  # too different in length to reach SIMILAR
        return False
    return SequenceMatcher(None, wa, wb).ratio() >= SIMILAR


def _close(words: list[str], before: list[str]) -> bool:
    """The words so far could still end up ``similar`` to a sentence said before: were the
    rest of the answer that sentence's rest, they would. A sentence let out half-way
    cannot be taken back, so this errs towards holding."""
    blocks = SequenceMatcher(None, words, before, autojunk=False).get_matching_blocks()
    matched = sum(b.size for b in blocks)
    rest = len(before) - max((b.b + b.size for b in blocks if b.size), default=0)
    return 2 * (matched + rest) / (len(words) + rest + len(before)) >= SIMILAR


def _whole_words(partial: str) -> list[str]:
    """The words of a sentence in progress, without its last one when that may be half a
    word ("gre" of "greasy")."""
    return normalise(partial).split()[: None if partial[-1:].isspace() else -1]


def has_loop(text: str) -> bool:
    """A phrase repeated inside ``text``: two words or more back to back, or
    ``LOOP_MIN_WORDS`` words anywhere."""
    words = normalise(text).split()
    for n in range(2, len(words) // 2 + 1):
        for i in range(len(words) - 2 * n + 1):
            if words[i : i + n] == words[i + n : i + 2 * n]:
                return True
    seen: set[tuple[str, ...]] = set()
    for i in range(len(words) - LOOP_MIN_WORDS + 1):
        gram = tuple(words[i : i + LOOP_MIN_WORDS])
        if gram in seen:
            return True
        seen.add(gram)
    return False


@lru_cache(maxsize=1024)
def units(text: str) -> tuple[str, ...]:
    """The sentences of ``text`` and, within them, its clauses of three words or more
    ("Hi there, how are you today?" -> the sentence and "how are you today")."""
    found = list(sentences(text))
    for sentence in sentences(text):
        clauses = CLAUSE.split(sentence)
        if len(clauses) > 1:
            found += [c for c in clauses if len(normalise(c).split()) >= 3]
    return tuple(found)


def echo_units(heard: str) -> tuple[str, ...]:
    """What an answer must not say back of the caller's turn: its sentences and clauses of
    ``ECHO_MIN_WORDS`` words or more ("Goodbye." back to "Okay, thanks. Goodbye." is a
    farewell, not an echo)."""
    return tuple(u for u in units(heard) if len(normalise(u).split()) >= ECHO_MIN_WORDS)


def is_question(heard: str) -> bool:
    """The caller asked (their turn ends on a question mark): a question is answered, so
    opening with its words is no echo, and an acknowledgement is no answer to it."""
    return heard.rstrip().endswith("?")


def reads_back(answer: str, heard: str) -> bool:
    """The answer says ``ECHO_RUN_WORDS`` of the caller's words in a row."""
    words, said = f" {normalise(answer)} ", normalise(heard).split()
    return any(
        f" {' '.join(said[i : i + ECHO_RUN_WORDS])} " in words
        for i in range(len(said) - ECHO_RUN_WORDS + 1)
    )


def opens_with_run_of(words: list[str], said: list[str]) -> bool:
    """``words`` open with ``ECHO_OPEN_WORDS`` of ``said`` in a row (both normalised by the
    caller's own rule: the editor's here, Whisper's in the eval)."""
    head = words[:ECHO_OPEN_WORDS]
    return len(head) == ECHO_OPEN_WORDS and f" {' '.join(head)} " in f" {' '.join(said)} "


def is_echo(answer: str, heard: str) -> bool:
    """The answer repeats the caller: one of its sentences is a sentence or clause of three
    words or more of the caller's turn, it reads back ``ECHO_RUN_WORDS`` of the caller's
    words in a row (a short read-back, "your booking number is 3 5 8", is not an echo), or,
    answering a statement, it opens with ``ECHO_OPEN_WORDS`` of them in a row."""
    if reads_back(answer, heard):
        return True
    said = normalise(heard).split()
    if not is_question(heard) and opens_with_run_of(normalise(answer).split(), said):
        return True
    return any(similar(a, h) for a in units(answer) for h in echo_units(heard))


def opening(words: Sequence[str]) -> tuple[str, ...] | None:
    """The first ``OPENING_WORDS`` of normalised ``words`` (None when there are fewer)."""
    head = tuple(words[:OPENING_WORDS])
    return head if len(head) == OPENING_WORDS else None


def repeats(answer: str, earlier: Iterable[str]) -> bool:
    """The answer says a sentence that one of the ``earlier`` answers already said."""
    before = [s for text in earlier for s in sentences(text)]
    return any(similar(a, b) for a in sentences(answer) for b in before)


class Verdict(Enum):
    GO = "go"  # keep streaming
    STOP = "stop"  # the answer is complete: stop decoding
    REGENERATE = "regenerate"  # nothing was said yet and it would repeat: ask again


@dataclass
class Edit:
    """What to pass on now, and whether to go on."""

    text: str = ""
    verdict: Verdict = Verdict.GO


class AnswerEditor:
    """Token stream in, the text that may be spoken out, sentence by sentence.

    ``said``: the bot's earlier answers in this call (what was spoken); ``heard``: the
    caller's turn being answered. ``feed`` each token; ``finish`` when the stream ended.
    A sentence held back to its end and found already said is dropped, and the answer goes
    on with the next one (a model that echoes the caller often goes on with something of
    its own). A ``REGENERATE`` or ``STOP`` verdict means: stop this stream (a new one may
    be fed to the same editor after ``REGENERATE``, which starts the current sentence over).
    """

    def __init__(
        self, said: Iterable[str], heard: str, max_sentences: int, recent: Sequence[str] = ()
    ) -> None:
        """``recent``: the call's answers so far, oldest first: the first try may not open
        as the last of them did."""
        units_said = [s for text in said for s in sentences(text)]
        heads = (opening(normalise(a).split()) for a in recent[-RECENT_OPENINGS:])
        self._openings = {head for head in heads if head is not None}
        self._blocked = [b for b in map(normalise, [*units_said, *echo_units(heard)]) if b]
        self._heard = heard
        self._asked = is_question(heard)
        self._max = max_sentences
        self._pending = ""  # the sentence in progress
        self._released = 0  # how much of it went out
        self._spaced = False  # what went out last ends in a space
        self.spoken: list[str] = []  # the sentences released whole
        self.skipped = 0  # sentences left unsaid
        self.cut: str | None = None  # why the answer was ended early, if it was

    @property
    def text(self) -> str:
        """Everything released so far."""
        return "".join([*self.spoken, self._pending[: self._released]])

    def restart(self, note: str = "") -> None:
        """A new stream follows: the sentence in progress (never released) starts over.
        ``note``: the instruction sent with it, which must not be read back either."""
        self._pending, self._released, self.skipped = "", 0, 0
        self._openings = set()  # the second try samples: its opening is its own
        self._blocked += [b for b in map(normalise, echo_units(note)) if b]
        self._heard = f"{self._heard} {note}".strip()

    def _said_before(self) -> list[str]:
        return [*self._blocked, *map(normalise, self.spoken)]

    def _blocks(self, sentence: str) -> bool:
        """Said before: the same words, nearly, or a sentence said before and then more
        ("And so my fellow Americans, we must ...")."""
        words = normalise(sentence)
        return bool(words) and (
            reads_back(sentence, self._heard)
            or any(
                similar(words, b) or (len(b.split()) >= 3 and words.startswith(b + " "))
                for b in self._said_before()
            )
        )

    def _copies_opening(self, words: list[str]) -> bool:
        """The answer would open with these words as one of the last answers opened."""
        return not self.spoken and opening(words) in self._openings

    def _may_open_with_echo(self, words: str) -> bool:
        """An answer to a statement whose words so far (normalised, the last one maybe half
        a word) are a run of the caller's: at ``ECHO_OPEN_WORDS`` words it is an echo,
        which ``feed`` ends, so none of it may go out before."""
        if self._asked or self.text.strip() or len(words.split()) > ECHO_OPEN_WORDS:
            return False
        return f" {words}" in f" {normalise(self._heard)} "

    def _held(self, partial: str) -> bool:
        """The sentence so far could still become one already said: keep it back.

        Exactly (its words begin one), or nearly: from three words on, see ``_close``. A
        sentence after the first is kept back whole (the module's docstring says why)."""
        words = normalise(partial)
        if not words or self.spoken:
            return True  # no word yet (an opening bracket or quote), or a later sentence
        whole = _whole_words(partial)
        if self._copies_opening(whole) or self._may_open_with_echo(words):
            return True
        for b in self._said_before():
            if b.startswith(words) or (len(b.split()) >= 3 and words.startswith(b + " ")):
                return True
            if any(len(w) >= 3 and _close(w, b.split()) for w in (whole, words.split())):
                return True
        return False

    def _words_out(self) -> bool:
        """Words of the sentence in progress went out (not only the space before it)."""
        return bool(normalise(self._pending[: self._released]))

    def _end_sentence(self, end: int) -> Edit:
        said = self._words_out()
        sentence, self._pending = self._pending[:end], self._pending[end:]
        released, self._released = self._released, 0
        copied = self._copies_opening(normalise(sentence).split())
        repeat = self._blocks(sentence) or copied
        loop = has_loop("".join(self.spoken) + sentence)
        if said and (repeat or loop):
            # Part of it is out already: a repeat is said to its end (half a sentence is
            # worse), a loop stops where it is. Nothing more of this answer.
            self.cut = "repeat" if repeat else "loop"
            out = "" if loop else sentence[released:]
            self.spoken.append(sentence if not loop else sentence[:released])
            return Edit(out, Verdict.STOP)
        if repeat or loop:
            self.cut = "opening" if copied else "repeat" if repeat else "loop"
            self.skipped += 1
            if self.skipped > MAX_SKIPPED:
                return Edit("", Verdict.STOP if self.spoken else Verdict.REGENERATE)
            return Edit("")  # left unsaid: the next sentence may be new
        out = sentence[released:]
        self.spoken.append(sentence)
        if len(self.spoken) >= self._max:
            self.cut = "sentences"
            return Edit(out, Verdict.STOP)
        return Edit(out)

    def feed(self, token: str) -> Edit:
        return self._went_out(self._feed(token))

    def finish(self) -> Edit:
        """The stream ended: its last sentence needs no mark after it to be judged. Nothing
        said and something left unsaid: ask again."""
        return self._went_out(self._finish())

    def _went_out(self, edit: Edit) -> Edit:
        """``edit``, without a second space where a sentence left unsaid had its own."""
        if self._spaced:
            edit.text = edit.text.lstrip()
        if edit.text:
            self._spaced = edit.text[-1].isspace()
        return edit

    def _feed(self, token: str) -> Edit:
        self._pending += token
        out = ""
        while (end := sentence_end(self._pending)) is not None:
            edit = self._end_sentence(end)
            out += edit.text
            if edit.verdict is not Verdict.GO:
                return Edit(out, edit.verdict)
        if has_loop("".join(self.spoken) + self._pending):
            self.cut = "loop"  # the rest of the loop is not said
            self.spoken.append(self._pending[: self._released])
            self._pending, self._released = "", 0
            return Edit(out, Verdict.STOP if self.text.strip() else Verdict.REGENERATE)
        whole = _whole_words(self._pending)
        if not self._words_out() and (
            reads_back(" ".join(whole), self._heard)
            or (
                not self._asked
                and not self.text.strip()
                and opens_with_run_of(whole, normalise(self._heard).split())
            )
        ):
            # Held, and already reading the caller's words back (or opening an answer to a
            # statement with them): its end can only drop it, or speak an echo, so decoding
            # stops now rather than after the rest of the caller's sentence.
            self.cut = "repeat"
            self.skipped += 1
            self._pending, self._released = "", 0
            return Edit(out, Verdict.STOP if self.text.strip() else Verdict.REGENERATE)
        if not self._held(self._pending):
            out += self._pending[self._released :]
            self._released = len(self._pending)
        elif not self._released and self.text.strip() and not self._spaced:
            # The space before a held sentence: the chunker sees the one said before it end.
            self._released = len(self._pending) - len(self._pending.lstrip())
            out += self._pending[: self._released]
        return Edit(out)

    def _finish(self) -> Edit:
        if not normalise(self._pending):
            out, self._pending = self._pending[self._released :], ""
            edit = Edit(out if self.spoken else "", Verdict.STOP)
        else:
            edit = self._end_sentence(len(self._pending))
        if not self.text.strip() and not edit.text and self.skipped:
            return Edit("", Verdict.REGENERATE)
        return edit
