"""Which turn records a live call hands to the server's metrics, and when.

A call's answer can finish (the bot stopped, was cut off, had nothing to say) before the turn
it is counted against was answered: the greeting stops after the caller's first turn ended.
A record handed then has no voice-to-voice, and is never handed again.
"""

from __future__ import annotations

from pathlib import Path

from agent.live.call import LiveCall, Runtime
from agent.settings import Settings
from agent.timing.budget import load_budget
from agent.timing.record import TurnRecord
from agent.timing.turn_timer import Turn, TurnTimer


def call_counting(calls_dir: Path) -> tuple[LiveCall, list[TurnRecord]]:
    """A LiveCall with a timer and no models (only its bookkeeping runs), and what it hands on."""
    settings = Settings()
    budget = load_budget(settings.budget_file, settings.budget_profile)
    handed: list[TurnRecord] = []
    call = LiveCall(Runtime(settings, None, None, budget), calls_dir, kind="test",  # type: ignore[arg-type]
                    on_turns=handed.extend)  # fmt: skip
    call.timer = TurnTimer(call.clock, budget)
    return call, handed


def caller_turn(number: int) -> Turn:
    turn = Turn(number=number, input=None)
    base = 10_000.0 * number
    turn.events.update(speech_start=base, speech_end=base + 2000, turn_end=base + 2300,
                       stt_final=base + 2350)  # fmt: skip
    return turn


def heard(turn: Turn) -> None:
    base = turn.events["speech_end"]
    assert base is not None
    turn.events.update(llm_request=base + 400, first_audio_out=base + 900)


def test_a_turn_is_handed_on_once_its_answer_was_heard(tmp_path):
    call, handed = call_counting(tmp_path)
    assert call.timer is not None
    turn = caller_turn(1)
    call.timer.turns.append(turn)
    call.answer_finished()  # the greeting stopped after the caller's turn ended
    assert handed == []
    heard(turn)
    call.answer_finished()  # the turn's own answer stopped
    call.answer_finished()  # and a barge-in finished it again: still once
    assert [(r.turn, r.voice_to_voice_ms) for r in handed] == [(1, 900.0)]


def test_a_turn_never_answered_is_handed_on_when_the_next_one_begins_or_the_call_ends(tmp_path):
    call, handed = call_counting(tmp_path)
    assert call.timer is not None
    call.timer.turns.append(caller_turn(1))
    call.answer_finished()  # its answer was cut off before it began
    assert handed == []
    second = caller_turn(2)
    second.events["turn_end"] = None  # the caller is still speaking
    call.timer.turns.append(second)
    call.answer_finished()
    assert [(r.turn, r.voice_to_voice_ms) for r in handed] == [(1, None)]
    call.finish()
    assert [r.turn for r in handed] == [1, 2]
