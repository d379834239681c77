"""A lull: the line has gone quiet inside a turn while the VAD still hears a voice, the moment
for recognition's pass (its transcript is then ready when the VAD pauses)."""

from __future__ import annotations

from agent.turns.sound_onset import SoundOnset

LULL_MARGIN_DB = 10.0  # a frame this far over the line's noise floor is a sound, not a lull


class Lull:
    """Once per lull: ``pass_ms`` of quiet line under a voice."""

    def __init__(self, pass_ms: int, rate: int) -> None:
        self._pass_ms, self._rate = pass_ms, rate
        self._line = SoundOnset(LULL_MARGIN_DB)
        self._reported = False

    def hear(self, pcm: bytes) -> None:
        self._line.update(pcm, self._rate)

    def due(self, in_turn: bool, voice: bool) -> bool:
        """Whether the lull is to be reported now (at most once until the line sounds again)."""
        quiet = self._line.quiet_samples
        if quiet == 0:
            self._reported = False
        elif (
            in_turn and voice and not self._reported and quiet * 1000 >= self._pass_ms * self._rate
        ):
            self._reported = True
            return True
        return False

    def quiet_from(self, heard: int) -> int | None:
        """Where the line went quiet (in input samples), if it is quiet now."""
        quiet = self._line.quiet_samples
        return None if quiet == 0 else heard - quiet
