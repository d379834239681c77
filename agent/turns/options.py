"""The turn-taking knobs in typed groups, one per strategy or component, read from
``TurnSettings`` (whose names, and so config files and environment variables, stay as they
are)."""

from __future__ import annotations

from dataclasses import dataclass

from agent.settings import TurnSettings
from agent.turns.policy import EndOfTurnPolicy


@dataclass(frozen=True)
class VadOptions:
    """Silero VAD: how long a voice or a silence must last, how sure and loud it must be;
    ``narrowband``: its 8 kHz model hears each window too."""

    start_secs: float
    stop_secs: float
    confidence: float
    min_volume: float
    narrowband: bool

    @classmethod
    def from_settings(cls, turn: TurnSettings) -> VadOptions:
        return cls(turn.vad_start_secs, turn.vad_stop_secs, turn.vad_confidence,
                   turn.vad_min_volume, turn.narrowband_vad)  # fmt: skip


@dataclass(frozen=True)
class BotOverlapOptions:
    """A voice over the bot: hold its audio at once (``hold_on_speech``, at a sound
    ``hold_onset_db`` over the noise floor), resume after ``hold_release_secs`` of quiet,
    interrupt after ``barge_in_secs`` of voice, unless the words only acknowledge it and the
    voice is shorter than ``backchannel_max_secs``."""

    hold_on_speech: bool
    hold_onset_db: float | None
    hold_release_secs: float
    barge_in_secs: float
    backchannel_max_secs: float | None

    @classmethod
    def from_settings(cls, turn: TurnSettings) -> BotOverlapOptions:
        return cls(turn.hold_on_speech, turn.hold_onset_db, turn.hold_release_secs,
                   turn.barge_in_secs, turn.backchannel_max_secs)  # fmt: skip


@dataclass(frozen=True)
class SilenceOptions:
    """The silences: ``lull_pass_ms`` of quiet line under a voice asks recognition for a pass,
    ``max_silence_secs`` ends any turn, and a turn starting within ``continuation_secs`` of
    the last one's end (no answer heard between) goes on from it."""

    lull_pass_ms: int | None
    max_silence_secs: float
    continuation_secs: float | None

    @classmethod
    def from_settings(cls, turn: TurnSettings) -> SilenceOptions:
        return cls(turn.lull_pass_ms, turn.max_silence_secs, turn.continuation_secs)


@dataclass(frozen=True)
class TurnOptions:
    """Every turn-taking knob, grouped; ``smart_turn``: Smart Turn is asked at all."""

    vad: VadOptions
    overlap: BotOverlapOptions
    silence: SilenceOptions
    end: EndOfTurnPolicy
    smart_turn: bool

    @classmethod
    def from_settings(cls, turn: TurnSettings) -> TurnOptions:
        return cls(
            vad=VadOptions.from_settings(turn),
            overlap=BotOverlapOptions.from_settings(turn),
            silence=SilenceOptions.from_settings(turn),
            end=EndOfTurnPolicy.from_settings(turn),
            smart_turn=turn.smart_turn,
        )
