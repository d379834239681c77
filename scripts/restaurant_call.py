"""Synthesise the example restaurant's booking call (the caller's turns) with Piper, as
16 kHz WAV files for ``voice-agent replay``: examples/restaurant/call/01.wav, 02.wav, ...

    .venv/bin/python scripts/restaurant_call.py
    .venv/bin/voice-agent replay examples/restaurant/call/*.wav \\
        --config examples/restaurant.yaml --out runs/restaurant --pace compute

Synthesised speech is fine here: the call shows the tools at work, not recognition.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import soundfile as sf

from agent.settings import Settings
from agent.synthesis.piper_tts import PiperVoiceModel

CALL = Path(__file__).resolve().parents[1] / "examples" / "restaurant" / "call"
RATE = 16000
LEAD_SECS = 0.5  # silence before the words and after them, as a caller's line has
TURNS = (
    "Hi, is there a table for four on Saturday, December the twelfth, at seven p.m.?",
    "Great, please book it. My name is Anna Lee, and my phone number is "
    "zero seven seven zero zero, nine zero zero, one two three.",
    "Where can I park nearby?",
)


def main() -> None:
    settings = Settings()
    voice = PiperVoiceModel.from_settings(settings.tts, settings.models_dir)
    CALL.mkdir(parents=True, exist_ok=True)
    quiet = np.zeros(int(LEAD_SECS * RATE), dtype=np.int16)
    for number, text in enumerate(TURNS, 1):
        speech = voice.synthesize(text, RATE)
        path = CALL / f"{number:02d}.wav"
        sf.write(path, np.concatenate([quiet, speech, quiet]), RATE, subtype="PCM_16")
        print(f"{path}: {text}")


if __name__ == "__main__":
    main()
