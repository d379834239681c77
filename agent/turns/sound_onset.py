"""Sound onset and lull: loud frames against the line's noise floor.

Why: Silero calls a soft onset ("We ...") a voice only 100-200 ms into it, so a barge-in
hold that waits for Silero lets the caller hear the bot that long. The turn detector holds
the bot's audio at the onset instead, and Silero then confirms the speech or the hold is
released. Silero is as slow at the other end: it hears a voice for 80-250 ms after the
last loud frame, so the turn detector also reports a lull (the line quiet for a moment,
``quiet_samples``) and recognition runs its pass then, not at Silero's pause.

The floor follows the quietest frames: it falls at once and rises slowly, so steady noise
lifts the floor rather than holding the bot; after an onset it re-arms only once the level
is back near the floor, so a sound that stays loud holds once, not again and again.
"""

from __future__ import annotations

import numpy as np

from agent.audio import level_dbfs

FLOOR_RISE_DB_PER_SEC = 6.0
MIN_DBFS = -50.0  # quieter than this is never an onset (a phone line's hiss, dither)


class SoundOnset:
    """Per call: feed it every input frame; True on a frame that starts a loud sound.

    ``quiet_samples``: how many samples have passed since the last loud frame (0 on one).
    """

    def __init__(self, rise_db: float) -> None:
        self._rise_db = rise_db
        self._floor_db: float | None = None
        self._armed = True
        self.quiet_samples = 0

    def update(self, pcm: bytes, rate: int) -> bool:
        samples = np.frombuffer(pcm, dtype=np.int16)
        if samples.size == 0:
            return False
        level = level_dbfs(samples)
        floor = level if self._floor_db is None else self._floor_db
        loud = level >= max(floor + self._rise_db, MIN_DBFS)
        self.quiet_samples = 0 if loud else self.quiet_samples + samples.size
        onset = loud and self._armed
        if onset:
            self._armed = False
        elif level < floor + self._rise_db / 2:
            self._armed = True
        rise = FLOOR_RISE_DB_PER_SEC * samples.size / rate
        self._floor_db = level if level < floor else min(level, floor + rise)
        return onset
