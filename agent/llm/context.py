"""The conversation context: user turns in from recognition, spoken bot text back from output.

``UserTurnAggregator`` (after recognition) adds each final transcript as a user message and
asks the LLM for an answer (at a pause, for a speculative one); an empty transcript asks
for nothing and says so upstream. Each interim transcript offers the turn so far for
prefilling. A caller who goes on before hearing an answer continues the same message:
words that follow a user message with no spoken answer after it are joined to it (and
recognition may revise the words it held, heard again with the new ones), a final
that comes while the caller already speaks again waits for the rest instead of being
answered over them, and an answer asked for but not yet playing is interrupted (dropped)
when the caller speaks again.
``SpokenTextAggregator`` (after the output transport) adds what the bot actually said:
only phrases whose audio was written reach it, so after a barge-in the context holds the
spoken part, not what the model wrote.
"""

from __future__ import annotations

from pipecat.frames.frames import (
    BotStartedSpeakingFrame,
    Frame,
    InterimTranscriptionFrame,
    InterruptionFrame,
    LLMContextFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    TranscriptionFrame,
    TTSTextFrame,
    UserStartedSpeakingFrame,
    UserStoppedSpeakingFrame,
)
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor

from agent.frames import (
    NoReplyFrame,
    PartialTurnFrame,
    SpeculativeTranscriptFrame,
    SpeculativeTurnFrame,
    TranscriptRevisionFrame,
    swap_ending,
)


def user_message(transcript: str) -> dict | None:
    """The user message a transcript makes, or None when it has no words to answer.

    Speculative and final turns build it the same way, so a speculation hits only when
    the final transcript is the pause transcript.
    """
    text = transcript.strip()
    return {"role": "user", "content": text} if any(ch.isalnum() for ch in text) else None


class UserTurnAggregator(FrameProcessor):
    """Final transcript -> user message in the context -> LLMContextFrame.

    A pause transcript becomes a ``SpeculativeTurnFrame``: the messages the turn will have
    if that transcript is final, without touching the context; an interim transcript, passed
    on, also becomes a ``PartialTurnFrame`` of the turn so far.
    """

    def __init__(self, context: LLMContext) -> None:
        super().__init__()
        self._context = context
        self._caller_speaking = False
        self._answer_due = False  # an answer was asked for and has not started playing

    def _turn_with(self, transcript: str) -> list[dict] | None:
        """The context's messages with ``transcript`` as the new user message, or joined to the
        last one when no answer was spoken after it (None: no words)."""
        message = user_message(transcript)
        if message is None:
            return None
        messages = list(self._context.get_messages())
        if messages and messages[-1].get("role") == "user":
            earlier = messages.pop()
            message = {"role": "user", "content": f"{earlier['content']} {message['content']}"}
        return [*messages, message]

    def _revise(self, frame: TranscriptRevisionFrame) -> None:
        """The caller's words heard again replace the ones the last user message holds."""
        messages = list(self._context.get_messages())
        told = " ".join(t for t, _ in frame.turns)
        now = " ".join(n for _, n in frame.turns)
        for i in range(len(messages) - 1, -1, -1):
            if messages[i].get("role") == "user":
                content = swap_ending(str(messages[i]["content"]), told, now)
                if content is not None:
                    messages[i] = {"role": "user", "content": content}
                    self._context.set_messages(messages)
                return

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, UserStartedSpeakingFrame | UserStoppedSpeakingFrame):
            self._caller_speaking = isinstance(frame, UserStartedSpeakingFrame)
            if self._caller_speaking and self._answer_due:
                self._answer_due = False
                await self.broadcast_interruption()
        elif isinstance(frame, BotStartedSpeakingFrame):
            self._answer_due = False  # playing: a barge-in is the turn detector's to call
        if isinstance(frame, TranscriptRevisionFrame):
            self._revise(frame)
            return
        if isinstance(frame, SpeculativeTranscriptFrame):
            if (turn := self._turn_with(frame.text)) is not None:
                await self.push_frame(SpeculativeTurnFrame(messages=turn))
            return
        if isinstance(frame, InterimTranscriptionFrame):
            await self.push_frame(frame, direction)
            if (turn := self._turn_with(frame.text)) is not None:
                await self.push_frame(PartialTurnFrame(messages=turn))
            return
        if not isinstance(frame, TranscriptionFrame):
            await self.push_frame(frame, direction)
            return
        turn = self._turn_with(frame.text)
        if turn is None:
            await self.push_frame(NoReplyFrame(), FrameDirection.UPSTREAM)
            return
        self._context.set_messages(turn)
        await self.push_frame(frame, direction)
        if self._caller_speaking:  # already going on: answered with the rest of the turn
            await self.push_frame(NoReplyFrame(), FrameDirection.UPSTREAM)
            return
        self._answer_due = True
        await self.push_frame(LLMContextFrame(context=self._context))


class SpokenTextAggregator(FrameProcessor):
    """Adds the bot's spoken text to the context when an answer ends or is cut off."""

    def __init__(self, context: LLMContext) -> None:
        super().__init__()
        self._context = context
        self._spoken: list[str] | None = None

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, LLMFullResponseStartFrame):
            self._spoken = []
        elif isinstance(frame, TTSTextFrame) and self._spoken is not None:
            self._spoken.append(frame.text)
        elif isinstance(frame, LLMFullResponseEndFrame | InterruptionFrame):
            self._commit()
        await self.push_frame(frame, direction)

    def _commit(self) -> None:
        if self._spoken:
            self._context.add_message({"role": "assistant", "content": " ".join(self._spoken)})
        self._spoken = None
