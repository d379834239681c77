"""Per-stage turn timer: a Pipecat observer that turns frames into turn records.

It sees every push of every frame; each frame is counted once (its first push, which is
the moment its producer released it). User-side events open and fill a turn; bot-side
events belong to the latest turn whose end has been decided, so a barge-in's interruption
lands on the turn that was being answered, not on the new one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pipecat.frames.frames import (
    InterimTranscriptionFrame,
    LLMTextFrame,
    TranscriptionFrame,
    TTSAudioRawFrame,
    TTSTextFrame,
    UserStoppedSpeakingFrame,
)
from pipecat.observers.base_observer import BaseObserver, FramePushed
from pipecat.transports.base_output import BaseOutputTransport

from agent.clock import CallClock
from agent.frames import (
    ClipStartedFrame,
    LLMUsageFrame,
    PhraseFrame,
    StageErrorFrame,
    TimelineEventFrame,
    TranscriptRevisionFrame,
    TurnEndReasonFrame,
    revised_texts,
)
from agent.timing import cpu
from agent.timing.budget import Budget
from agent.timing.critical_path import critical_path
from agent.timing.record import LLMUsage, TurnRecord
from agent.timing.timeline import EVENTS, stages_and_gaps
from agent.timing.tracing import stage_intervals

USER_EVENTS = {"speech_start", "speech_end", "turn_end", "stt_final"}
WATCHED = (
    TimelineEventFrame,
    TranscriptRevisionFrame,
    UserStoppedSpeakingFrame,
    TranscriptionFrame,
    InterimTranscriptionFrame,
    LLMTextFrame,
    PhraseFrame,
    TTSAudioRawFrame,
    LLMUsageFrame,
    StageErrorFrame,
    TurnEndReasonFrame,
)
LAST_WINS = {"bot_audio_end", "tool_result"}  # tool: from the first call to the last result


@dataclass
class Turn:
    """What one user turn and its answer produced, as it happens."""

    number: int
    input: str | None = None
    user_text: str = ""
    bot_text: str = ""
    spoken_text: str = ""
    events: dict[str, float | None] = field(default_factory=lambda: dict.fromkeys(EVENTS))
    exact: set[str] = field(default_factory=set)
    llm: LLMUsage | None = None
    errors: list[str] = field(default_factory=list)
    end_reason: str | None = None
    end_value: float | None = None
    end_words: float | None = None
    end_goes_on: float | None = None
    end_text: str = ""
    last_interim: str = ""

    def record(self, budget: Budget | None) -> TurnRecord:
        """The turn record of the record contract (docs/design.md), as it stands now."""
        stages, gaps, lead = stages_and_gaps(self.events)
        return TurnRecord(
            turn=self.number,
            input=self.input,
            user_text=self.user_text.strip(),
            bot_text=" ".join(self.bot_text.split()),
            spoken_text=" ".join(self.spoken_text.split()),
            events=dict(self.events),
            stages=stages,
            gaps=gaps,
            stt_lead_ms=lead,
            voice_to_voice_ms=stages["voice_to_voice"],
            llm=self.llm,
            budget=budget.turn_verdicts(stages) if budget else {},
            interrupted=self.events["interrupted"] is not None,
            turn_end_reason=self.end_reason,
            turn_end_value=self.end_value,
            turn_end_words=self.end_words,
            turn_end_goes_on=self.end_goes_on,
            turn_end_text=self.end_text,
            last_interim_text=self.last_interim,
            errors=list(self.errors),
        )


class TurnTimer(BaseObserver):
    """Collects turn records from the frames of one call."""

    def __init__(self, clock: CallClock, budget: Budget | None = None) -> None:
        super().__init__()
        self._clock = clock
        self._budget = budget
        self._clip: str | None = None  # the replayed file playing now
        self._seen: set[int] = set()
        self.turns: list[Turn] = []

    # -- turn bookkeeping -------------------------------------------------------------------

    def _user_turn(self, opening: bool = False) -> Turn:
        """The latest user turn; ``speech_start`` opens a new one once the last has ended."""
        if not self.turns or (opening and self.turns[-1].events["turn_end"] is not None):
            self.turns.append(Turn(number=len(self.turns) + 1, input=self._clip))
        return self.turns[-1]

    def _bot_turn(self) -> Turn | None:
        for turn in reversed(self.turns):
            if turn.events["turn_end"] is not None:
                return turn
        return None

    def _set(self, event: str, at_ms: float, exact: bool = True) -> None:
        if event in USER_EVENTS:
            turn: Turn | None = self._user_turn(opening=event == "speech_start")
        else:
            turn = self._bot_turn()
        if turn is None:
            return
        have = turn.events[event]
        if event in LAST_WINS or event == "speech_end" and event not in turn.exact:
            turn.events[event] = at_ms
        elif have is None or (exact and event not in turn.exact):
            turn.events[event] = at_ms
        if exact:
            turn.exact.add(event)

    def _revise(self, turns: list[tuple[str, str]]) -> None:
        """Recognition heard the caller's last turns' words again (the open turn, with no
        words yet, goes on from them): their records take the words heard now."""
        texts = revised_texts([t.user_text for t in self.turns], turns)
        for turn, text in zip(self.turns, texts or [], strict=False):
            turn.user_text = text

    def records(self) -> list[TurnRecord]:
        """All turn records so far."""
        records = [t.record(self._budget) for t in self.turns]
        if (ledger := cpu.active()) is not None:  # a CPU profile runs: what each turn waited on
            for record in records:
                record.critical_path = critical_path(stage_intervals(record), ledger.jobs)
        return records

    # -- observer ---------------------------------------------------------------------------

    async def on_push_frame(self, data: FramePushed) -> None:
        frame = data.frame
        if isinstance(frame, TTSTextFrame) and isinstance(data.source, BaseOutputTransport):
            turn = self._bot_turn()  # the output releases a phrase's text once it was played
            if turn:
                turn.spoken_text += " " + frame.text
            return
        if isinstance(frame, ClipStartedFrame):
            self._clip = frame.clip
            return
        if not isinstance(frame, WATCHED) or frame.id in self._seen:
            return
        self._seen.add(frame.id)
        now = self._clock.now_ms()
        if isinstance(frame, TimelineEventFrame):
            self._set(frame.event, frame.at_ms, frame.exact)
        elif isinstance(frame, TurnEndReasonFrame):
            turn = self._user_turn()
            turn.end_reason, turn.end_value = frame.reason, frame.value
            turn.end_words, turn.end_text = frame.words, frame.text
            turn.end_goes_on = frame.goes_on
        elif isinstance(frame, UserStoppedSpeakingFrame):
            self._set("turn_end", now)
        elif isinstance(frame, TranscriptionFrame):
            self._user_turn().user_text += frame.text
        elif isinstance(frame, InterimTranscriptionFrame):
            self._user_turn().last_interim = frame.text
        elif isinstance(frame, TranscriptRevisionFrame):
            self._revise(frame.turns)
        elif isinstance(frame, LLMTextFrame):
            turn = self._bot_turn()
            if turn and turn.events["llm_request"] is not None:
                self._set("llm_first_token", now)
        elif isinstance(frame, PhraseFrame):
            self._set("first_phrase", now)
            turn = self._bot_turn()
            if turn:
                turn.bot_text += " " + frame.text
        elif isinstance(frame, TTSAudioRawFrame):
            self._set("tts_first_audio", now)
        elif isinstance(frame, LLMUsageFrame):
            turn = self._bot_turn()
            if turn:
                turn.llm = LLMUsage(
                    prompt_tokens=frame.prompt_tokens,
                    cached_tokens=frame.cached_tokens,
                    completion_tokens=frame.completion_tokens,
                    itl_ms=frame.itl_ms,
                    speculative=frame.speculative,
                    speculation_misses=frame.speculation_misses,
                )
                if frame.error:
                    turn.errors.append(frame.error)
        elif isinstance(frame, StageErrorFrame):
            user_side = frame.stage == "stt"
            turn = (None if user_side else self._bot_turn()) or self._user_turn()
            turn.errors.append(f"{frame.stage}: {frame.error}")
