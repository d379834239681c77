"""The VAD and Smart Turn sessions are shared by every call; each call's VAD state is its own."""

import asyncio

import numpy as np
import pytest
from pipecat.audio.vad.vad_analyzer import VADParams, VADState

from agent.audio import load_audio
from agent.settings import Settings, TurnSettings
from agent.transports.g711 import through_phone_line
from agent.turns.options import VadOptions
from agent.turns.vad import SharedSileroVAD, TurnModels
from tests.support.clips import CORPUS, SAMPLES, needs_corpus

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


# `main/` sentences said without a pause, in each of which Silero's 16 kHz model heard one
# through the phone codec (its 8 kHz model none, and at 16 kHz neither).
UNBROKEN = ("vctk_p226_016", "vctk_p226_019", "vctk_p228_008", "vctk_p228_011",
            "arctic_aew_a0001")  # fmt: skip


def heard(turn: TurnSettings, audio: np.ndarray) -> tuple[int, int]:
    """How often the turn settings' VAD hears speech start and pause in the audio (with
    half a second of silence before it and one after)."""
    vad = SharedSileroVAD.for_turns(TurnModels.load().silero, VadOptions.from_settings(turn), RATE)
    padded = np.concatenate([np.zeros(RATE // 2, np.int16), audio, np.zeros(RATE, np.int16)])
    seen = states(vad, padded)
    pairs = list(zip(seen, seen[1:], strict=False))
    starts = sum(1 for a, b in pairs if a == VADState.STARTING and b == VADState.SPEAKING)
    pauses = sum(1 for a, b in pairs if a == VADState.STOPPING and b == VADState.QUIET)
    return starts, pauses


@needs_corpus
def test_a_phone_line_heard_by_both_models_has_no_pause_the_caller_did_not_make():
    wide, phone = Settings().turn, Settings().for_phone().turn
    assert phone.narrowband_vad and not wide.narrowband_vad
    clips = [load_audio(CORPUS / "main" / f"{name}.wav", RATE) for name in UNBROKEN]
    lines = [through_phone_line(clip) for clip in clips]
    assert [heard(wide, clip) for clip in clips] == [(1, 1)] * len(clips)
    # the 16 kHz model alone hears pauses inside these sentences on the phone line
    assert sum(heard(wide, line)[1] for line in lines) > len(clips)
    assert [heard(phone, line) for line in lines] == [(1, 1)] * len(clips)


@needs_corpus
def test_a_quiet_word_on_a_phone_line_is_heard():
    """A quiet "zero" (peak -34 dBFS), which Silero's 8 kHz model alone does not hear."""
    zero = through_phone_line(load_audio(CORPUS / "short" / "audiomnist_0_01_0.wav", RATE))
    assert heard(Settings().for_phone().turn, zero) == (1, 1)
