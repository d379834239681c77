"""Sound onset (the barge-in hold's trigger before Silero hears a voice), on real speech
through the phone codec and on noise."""

from __future__ import annotations

import numpy as np

from agent.audio import load_audio, speech_bounds
from agent.recognition.sound_onset import SoundOnset
from tests.conftest import SAMPLES

RATE = 16000
FRAME = 320  # 20 ms


def onset_frames(samples: np.ndarray, rise_db: float = 10.0) -> list[int]:
    detector = SoundOnset(rise_db)
    return [
        i
        for i in range(len(samples) // FRAME)
        if detector.update(samples[i * FRAME : (i + 1) * FRAME].tobytes(), RATE)
    ]


def test_the_onset_is_the_first_frame_of_the_caller_speaking():
    for clip in ("new_home_in_the_stars.wav", "ldc93s1.wav", "jfk_part2.wav"):
        samples = load_audio(SAMPLES / clip, RATE)
        start = speech_bounds(samples, RATE)[0] // FRAME
        first = onset_frames(samples)[0]
        assert start - 1 <= first <= start + 3, clip  # within 60 ms of the first speech sample


def test_noise_holds_once_when_it_starts_and_never_while_it_lasts():
    rng = np.random.default_rng(0)
    noise = (rng.standard_normal(RATE * 10) * 3000).astype(np.int16)
    assert onset_frames(noise) == []  # steady from the start: it is the floor
    after_silence = np.concatenate([np.zeros(RATE, np.int16), noise])
    assert onset_frames(after_silence) == [RATE // FRAME]  # once, as it starts
