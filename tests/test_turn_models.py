"""The VAD and Smart Turn sessions are shared by every call; each call's VAD state is its own."""

import asyncio

import numpy as np
import pytest
from pipecat.audio.vad.vad_analyzer import VADParams, VADState

from agent.audio import load_audio
from agent.recognition.turn_detector import SharedSileroVAD, TurnModels
from tests.conftest import SAMPLES

pytestmark = pytest.mark.slow

RATE = 16000
CHUNK = 320  # 20 ms, as the transports send it


def states(vad: SharedSileroVAD, audio: np.ndarray) -> list[VADState]:
    async def run() -> list[VADState]:
        out = []
        for i in range(0, len(audio) - CHUNK, CHUNK):
            out.append(await vad.analyze_audio(audio[i : i + CHUNK].tobytes()))
        return out

    return asyncio.run(run())


def test_two_calls_on_one_session_keep_their_own_state():
    models = TurnModels.load()
    params = VADParams(start_secs=0.2, stop_secs=0.2)
    speech = load_audio(SAMPLES / "ldc93s1.wav", RATE)[: RATE * 2]
    silence = np.zeros_like(speech)

    def vad() -> SharedSileroVAD:
        analyzer = SharedSileroVAD(models.silero, sample_rate=RATE, params=params)
        analyzer.set_sample_rate(RATE)
        return analyzer

    alone = states(vad(), speech)
    assert VADState.SPEAKING in alone
    # A second call hears silence on the same session, interleaved window by window.
    talking, quiet = vad(), vad()
    assert talking._model.session is quiet._model.session is models.silero.session

    async def interleaved() -> tuple[list[VADState], list[VADState]]:
        a, b = [], []
        for i in range(0, len(speech) - CHUNK, CHUNK):
            a.append(await talking.analyze_audio(speech[i : i + CHUNK].tobytes()))
            b.append(await quiet.analyze_audio(silence[i : i + CHUNK].tobytes()))
        return a, b

    heard, nothing = asyncio.run(interleaved())
    assert heard == alone  # the other call's windows did not leak into this one's state
    assert set(nothing) == {VADState.QUIET}
