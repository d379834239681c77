"""Our frames: the only interface between our processors besides Pipecat's own frames."""

from __future__ import annotations

from dataclasses import dataclass, field

from pipecat.frames.frames import DataFrame, SystemFrame


@dataclass
class ClipStartedFrame(SystemFrame):
    """A replayed input file starts playing: the turns that open while it plays are its."""

    clip: str = ""  # (``name`` is the frame's own)
    at_ms: float = 0.0


@dataclass
class TurnEndReasonFrame(SystemFrame):
    """Why the turn detector ended a turn: the signal (smart_turn, smart_turn_and_text,
    one_word, words, max_silence) and its value (a probability, or the silence in seconds);
    ``words``: the LLM's probability that the caller's message ended there (None: not
    asked); ``goes_on``: recognition's probability of a comma where it closed those words
    (``PauseTranscriptFrame.goes_on``); ``text``: the words the decision read (recognition's
    pause transcript, "" when none had come), which may differ from the turn's final text."""

    reason: str = ""
    value: float = 0.0
    words: float | None = None
    goes_on: float | None = None
    text: str = ""


@dataclass
class TimelineEventFrame(SystemFrame):
    """A turn-timeline event (a name from timing.timeline.EVENTS) measured where it happened.

    ``at_ms`` is on the call clock. ``exact`` events (replay knows speech bounds exactly)
    win over estimates (a live VAD's stop time minus its stop window).
    """

    event: str = ""
    at_ms: float = 0.0
    exact: bool = True


@dataclass
class LLMUsageFrame(SystemFrame):
    """Token accounting of one LLM answer, for the turn record."""

    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    completion_tokens: int | None = None
    itl_ms: float | None = None
    error: str | None = None
    speculative: bool = False  # started at the pause, before the turn ended (a hit)
    speculation_misses: int = 0  # speculative answers dropped since the previous answer


@dataclass
class PhraseFrame(DataFrame):
    """A speakable phrase handed to the synthesiser (already normalised for speech)."""

    text: str = ""


@dataclass
class NoReplyFrame(SystemFrame):
    """The user turn ended without anything to answer (empty transcript); pushed upstream."""


@dataclass
class SpeechLullFrame(SystemFrame):
    """The line has gone quiet inside a turn while the VAD still hears a voice.

    Silero goes on hearing a voice for a while after the last loud frame; recognition runs a
    pass now, so that if this is the end of the turn its transcript is ready when the VAD
    pauses.
    """


@dataclass
class SpeechPausedFrame(SystemFrame):
    """The VAD just heard silence inside a turn (before its stop window confirms a stop).

    ``quiet_from``: where the line went quiet, as a count of the call's input samples, when
    it has stayed quiet since (None otherwise). A pass over the audio up to that point or
    later heard the whole turn so far, so recognition may keep it as its pause transcript.
    """

    quiet_from: int | None = None


@dataclass
class PauseTranscriptFrame(SystemFrame):
    """Upstream, from recognition: the transcript of the turn so far, taken at a pause.

    The turn detector uses it as a second end-of-turn signal (a finished sentence);
    ``goes_on``: Whisper's probability of a comma where it closed the text with a full stop
    (``whisper_decoder.Pass.goes_on``; None when it did not close it), words heard going on.
    """

    text: str = ""
    goes_on: float | None = None


@dataclass
class StopAnswerFrame(SystemFrame):
    """Upstream, to the LLM stage: stop generating the current answer (nothing is flushed)."""


@dataclass
class StageErrorFrame(SystemFrame):
    """A stage failed and recovered (or gave up) inside the call: recorded in the turn's
    ``errors``. ``stage`` is one of stt, llm, tts, transport; ``error`` is one short line."""

    stage: str = ""
    error: str = ""


@dataclass
class SpeculativeTranscriptFrame(SystemFrame):
    """Downstream, from recognition: the transcript taken at a pause, before the turn ends.

    It becomes the final transcript unless the caller speaks again, so the LLM may start on it.
    """

    text: str = ""


@dataclass
class TranscriptRevisionFrame(SystemFrame):
    """Downstream, from recognition: the caller's last turns, which the current one goes on
    from, heard again with it. ``turns``: (their final text, their words now), oldest first;
    the context and the turn records swap one for the other."""

    turns: list[tuple[str, str]] = field(default_factory=list)


def swap_ending(text: str, told: str, now: str) -> str | None:
    """``text`` with its closing words ``told`` replaced by ``now`` (None: it does not end
    with them); words compare as written, spaces aside."""
    words, ending = text.split(), told.split()
    if not ending or words[len(words) - len(ending) :] != ending:
        return None
    return " ".join(words[: len(words) - len(ending)] + now.split())


def revised_texts(texts: list[str], turns: list[tuple[str, str]]) -> list[str] | None:
    """The caller's turns' texts (oldest first) with a ``TranscriptRevisionFrame``'s
    ``turns`` applied to the last of them with words; None when those do not end as told."""
    spoken = [i for i, text in enumerate(texts) if text.strip()][-len(turns) :]
    if not turns or len(spoken) != len(turns):
        return None
    out = list(texts)
    for i, (told, now) in zip(spoken, turns, strict=True):
        if (text := swap_ending(texts[i], told, now)) is None:
            return None
        out[i] = text
    return out


@dataclass
class SpeculativeTurnFrame(SystemFrame):
    """To the LLM stage: the messages the turn will have if the pause transcript is final."""

    messages: list = field(default_factory=list)


@dataclass
class EndOfMessageFrame(SystemFrame):
    """Upstream, from the LLM stage to turn detection: the model's probability that the
    caller's message (``text``, which ends with the pause transcript) ends after its words
    (None: the engine cannot tell, or failed)."""

    probability: float | None = None
    text: str = ""


@dataclass
class HoldBotAudioFrame(SystemFrame):
    """Downstream, from turn detection to the output: the caller may be talking over the bot
    (the VAD's first speech window). The output stops sending bot audio (``hold``) until the
    barge-in is confirmed (an interruption follows) or called off (``hold`` False).
    ``before_answer``: the caller's turn had ended and its answer had not begun to play (the
    caller may be going on): the answer must not start, and there is nothing to resume."""

    hold: bool = True
    before_answer: bool = False


@dataclass
class OverlapCheckFrame(SystemFrame):
    """Downstream, from turn detection to recognition: what did the voice over the bot say?
    Recognition answers with an ``OverlapTranscriptFrame`` over the audio since the hold."""


@dataclass
class OverlapTranscriptFrame(SystemFrame):
    """Upstream, from recognition: the words of the voice over the bot ("" for none), which
    tell a backchannel ("mm-hmm", "yeah") that leaves the answer going from an interruption."""

    text: str = ""


@dataclass
class HeldAnswerTextFrame(SystemFrame):
    """Downstream, from the LLM stage: the text so far of a speculative answer, held back
    until the turn confirms it. The chunker may find its first phrase in it already."""

    text: str = ""


@dataclass
class FirstPhraseAheadFrame(SystemFrame):
    """Downstream, from the chunker: the first phrase a held answer starts with. Synthesis
    prepares its audio now, and uses it if that phrase comes to be spoken."""

    text: str = ""


@dataclass
class FirstPhraseSynthesisFrame(SystemFrame):
    """Upstream, from synthesis to the LLM stage: an answer's first phrase is being
    synthesised (``busy``) or is done. That phrase is on the caller's critical path and the
    answer's later tokens are not, so the in-process engine stops decoding meanwhile."""

    busy: bool = True


@dataclass
class PartialTurnFrame(SystemFrame):
    """To the LLM stage: the messages of the turn so far (an interim transcript as the user
    message), for the engine to prefill while the caller is still speaking."""

    messages: list = field(default_factory=list)
