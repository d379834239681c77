"""Sound onset (the barge-in hold's trigger before Silero hears a voice), on real speech
through the phone codec and on noise."""

from __future__ import annotations

import numpy as np

from agent.audio import load_audio, speech_bounds
from agent.turns.sound_onset import SoundOnset
from tests.support.clips import SAMPLES

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


def test_the_line_is_quiet_from_the_end_of_the_speech_until_the_next_sound():
    # clean recordings (the JFK clips' room noise stays loud for 0.2-0.6 s after the voice)
    for clip in ("new_home_in_the_stars.wav", "ldc93s1.wav"):
        samples = load_audio(SAMPLES / clip, RATE)
        start, end = speech_bounds(samples, RATE)
        again = samples[start : start + RATE // 2]  # the caller speaks again
        end //= FRAME
        samples = np.concatenate([samples, np.zeros(RATE // 2, np.int16), again])
        detector = SoundOnset(10.0)
        quiet = []
        for i in range(len(samples) // FRAME):
            detector.update(samples[i * FRAME : (i + 1) * FRAME].tobytes(), RATE)
            quiet.append(detector.quiet_samples)
        loud = [i for i, q in enumerate(quiet) if q == 0]
        last_loud = max(i for i in loud if i <= end + 10)
        # the speech's weakest tail (35 dB under its peak) may already count as quiet
        assert end - 5 <= last_loud <= end, clip
        next_loud = min(i for i in loud if i > last_loud)
        assert next_loud >= end + 25, clip  # quiet through the half second of silence
        assert quiet[next_loud - 1] == (next_loud - 1 - last_loud) * FRAME, clip
