"""The synthesis stage, with a scripted voice and with the real Piper voice: phrase audio in
order, and the first phrase's busy window reported upstream (the LLM stage pauses decoding
inside it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pipecat.frames.frames import LLMFullResponseEndFrame, TTSAudioRawFrame, TTSTextFrame
from pipecat.tests.utils import SleepFrame

from agent.frames import FirstPhraseAheadFrame, FirstPhraseSynthesisFrame, PhraseFrame
from agent.synthesis.piper_tts import PiperTTS, PiperVoiceModel
from tests.support.compute_pace import run_paced
from tests.support.fakes import ScriptedVoice


class CountingVoice(PiperVoiceModel):
    """The real voice, counting which texts it synthesises."""

    def __init__(self, voice_path: Path, **tuning: Any) -> None:
        super().__init__(voice_path, **tuning)
        self.texts: list[str] = []

    def synthesize(self, text: str, out_rate: int) -> np.ndarray:
        self.texts.append(text)
        return super().synthesize(text, out_rate)


@pytest.fixture(params=["scripted", pytest.param("piper", marks=pytest.mark.slow)])
def voice(request, settings) -> CountingVoice | ScriptedVoice:
    if request.param == "piper":
        return CountingVoice.from_settings(settings.tts, settings.models_dir)
    return ScriptedVoice(delay_secs=0.02)


async def test_first_phrase_synthesis_is_reported_upstream_and_phrases_keep_order(voice):
    phrases = ["Hello there,", "how can I help you today?"]
    answer = [PhraseFrame(text=t) for t in phrases]
    down, up = await run_paced(
        PiperTTS(voice, rate=16000),
        frames_to_send=[
            *answer,
            LLMFullResponseEndFrame(),
            *answer,
            LLMFullResponseEndFrame(),
            SleepFrame(sleep=0.3),  # once all is synthesised (compute pace): the call's end
        ],  # fmt: skip
    )
    # Each answer's first phrase, and only it: busy while it is synthesised, then done.
    assert [f.busy for f in up if isinstance(f, FirstPhraseSynthesisFrame)] == [True, False] * 2
    assert [f.text for f in down if isinstance(f, TTSTextFrame)] == phrases * 2
    audio = [f for f in down if isinstance(f, TTSAudioRawFrame)]
    assert len(audio) == 4 and all(len(f.audio) > 16000 // 4 for f in audio)


async def test_a_held_answers_first_phrase_is_synthesised_once_ahead_of_its_turn(voice):
    ahead = voice.synthesize("Hi", 16000)
    voice.texts.clear()
    down, _ = await run_paced(
        PiperTTS(voice, rate=16000),
        frames_to_send=[
            FirstPhraseAheadFrame(text="I'm sorry,"),  # a held answer: a miss
            FirstPhraseAheadFrame(text="Hello there,"),  # the next one: a hit
            SleepFrame(sleep=0.15),  # the turn detector is still deciding
            PhraseFrame(text="Hello there,"),
            PhraseFrame(text="I'm sorry,"),  # not the first phrase: synthesised again
            LLMFullResponseEndFrame(),
            SleepFrame(sleep=0.3),
        ],
    )
    assert voice.texts == ["I'm sorry,", "Hello there,", "I'm sorry,"]
    audio = [f.audio for f in down if isinstance(f, TTSAudioRawFrame)]
    assert [f.text for f in down if isinstance(f, TTSTextFrame)] == ["Hello there,", "I'm sorry,"]
    assert len(audio) == 2 and all(len(a) > len(ahead) for a in audio)  # ~0.5 s each
