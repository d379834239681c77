"""A caller who goes on before hearing an answer continues the same turn: the answer that
was coming is dropped, and the LLM gets both parts as one message.

The aggregator alone (no models): frames in the order the pipeline delivers them, with
a step on the compute clock between them (all sent so far has gone through) so system
frames (turn starts and stops) and data frames (transcripts) arrive in that order."""

from __future__ import annotations

from pipecat.frames.frames import (
    BotStartedSpeakingFrame,
    InterruptionFrame,
    LLMContextFrame,
    TranscriptionFrame,
    UserStartedSpeakingFrame,
    UserStoppedSpeakingFrame,
)
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.frame_processor import FrameDirection
from pipecat.tests.utils import SleepFrame

from agent.frames import NoReplyFrame, TranscriptRevisionFrame
from agent.llm.context import UserTurnAggregator
from tests.support.compute_pace import run_paced

STEP = SleepFrame(sleep=0.2)
EARLIER = [{"role": "user", "content": "Hi."}, {"role": "assistant", "content": "Hello!"}]


def final(text: str) -> TranscriptionFrame:
    return TranscriptionFrame(text=text, user_id="caller", timestamp="", finalized=True)


def turn(text: str, *, resumed_before_final: bool = False) -> list:
    """One turn: start, stop, its final (which may come after the caller speaks again)."""
    frames = [UserStartedSpeakingFrame(), STEP, UserStoppedSpeakingFrame(), STEP]
    if resumed_before_final:
        return [*frames, UserStartedSpeakingFrame(), STEP, final(text), STEP]
    return [*frames, final(text), STEP]


class AskLog(UserTurnAggregator):
    """Notes the last user message each time it asks for an answer (the frame carries the
    live context, which later turns change)."""

    def __init__(self, context: LLMContext) -> None:
        super().__init__(context)
        self.asked: list[str] = []

    async def push_frame(self, frame, direction=FrameDirection.DOWNSTREAM):
        if isinstance(frame, LLMContextFrame):
            self.asked.append(frame.context.get_messages()[-1]["content"])
        await super().push_frame(frame, direction)


async def test_speaking_again_before_the_answer_plays_drops_it_and_joins_the_words():
    ctx = LLMContext(messages=list(EARLIER))
    aggregator = AskLog(ctx)
    frames = [*turn("I'd like to book a table."), *turn("For two, at eight.")]
    down, _ = await run_paced(aggregator, frames_to_send=frames)
    joined = "I'd like to book a table. For two, at eight."
    assert aggregator.asked == ["I'd like to book a table.", joined]
    assert sum(isinstance(f, InterruptionFrame) for f in down) == 1  # the first answer dropped
    assert ctx.get_messages() == [*EARLIER, {"role": "user", "content": joined}]


async def test_a_final_that_comes_while_the_caller_speaks_again_waits_for_the_rest():
    ctx = LLMContext(messages=list(EARLIER))
    aggregator = AskLog(ctx)
    first = turn("My number is 0 1 2 3,", resumed_before_final=True)
    frames = [*first, UserStoppedSpeakingFrame(), STEP, final("4 5 6."), STEP]
    down, up = await run_paced(aggregator, frames_to_send=frames)
    assert aggregator.asked == ["My number is 0 1 2 3, 4 5 6."]  # one answer, to all of it
    assert any(isinstance(f, NoReplyFrame) for f in up)  # the call knows no answer is coming
    assert not any(isinstance(f, InterruptionFrame) for f in down)


async def test_speaking_after_the_answer_started_playing_is_a_new_turn():
    ctx = LLMContext(messages=list(EARLIER))
    aggregator = AskLog(ctx)
    frames = [*turn("What time is it?"), BotStartedSpeakingFrame(), STEP, *turn("Thanks.")]
    down, _ = await run_paced(aggregator, frames_to_send=frames)
    # a barge-in over a playing answer is the turn detector's to call, not the aggregator's
    assert not any(isinstance(f, InterruptionFrame) for f in down)
    assert len(aggregator.asked) == 2


async def test_words_heard_again_with_the_next_part_replace_the_ones_the_message_held():
    """Through the phone codec the first part of "These take the shape of a long round arch,
    [pause] with its path high above" came out "Please take the shape ..."; heard again with
    the second part, its words are right, and the message the LLM reads takes them."""
    ctx = LLMContext(messages=list(EARLIER))
    aggregator = AskLog(ctx)
    revision = TranscriptRevisionFrame(
        turns=[
            (
                "Please take the shape of a long round arch.",
                "These take the shape of a long round arch,",
            )
        ]
    )
    frames = [*turn("Please take the shape of a long round arch."), revision, STEP]
    frames += turn("with its path high above.")
    await run_paced(aggregator, frames_to_send=frames)
    joined = "These take the shape of a long round arch, with its path high above."
    assert aggregator.asked[-1] == joined
    assert ctx.get_messages() == [*EARLIER, {"role": "user", "content": joined}]


async def test_a_revision_of_words_the_message_does_not_end_with_changes_nothing():
    ctx = LLMContext(messages=list(EARLIER))
    aggregator = AskLog(ctx)
    revision = TranscriptRevisionFrame(turns=[("Something else.", "Other words,")])
    frames = [*turn("What time is it?"), revision, STEP]
    await run_paced(aggregator, frames_to_send=frames)
    assert ctx.get_messages()[-1] == {"role": "user", "content": "What time is it?"}
