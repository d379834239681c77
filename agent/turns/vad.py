"""The models that hear a voice and a turn's end, loaded once per process, and the VAD of one
call on the shared Silero session."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
from pipecat.audio.turn.smart_turn.local_smart_turn_v3 import LocalSmartTurnAnalyzerV3
from pipecat.audio.vad.silero import SileroOnnxModel
from pipecat.audio.vad.vad_analyzer import VADParams

from agent.timing import cpu
from agent.turns.options import VadOptions
from agent.turns.pipecat_compat import SessionSileroVAD, bundled_silero, own_state

NARROWBAND_RATE = 8000  # Silero's telephone model


@dataclass
class TurnModels:
    """The Silero VAD and Smart Turn ONNX sessions, loaded once per process.

    A session per call leaked: benchmarks/soak.py grew about 230 MiB a minute with 4 callers,
    80 MiB without Smart Turn. onnxruntime sessions may be run from many threads at once;
    what belongs to one call (Silero's recurrent state) lives in ``SharedSileroVAD``.
    """

    silero: SileroOnnxModel
    smart_turn: LocalSmartTurnAnalyzerV3  # loaded even when off: a call's settings may turn it on

    @classmethod
    @functools.cache  # once per process, however many pipelines ask
    def load(cls) -> TurnModels:
        return cls(silero=bundled_silero(), smart_turn=LocalSmartTurnAnalyzerV3())


class SharedSileroVAD(SessionSileroVAD):
    """Silero VAD for one call on the process's ONNX session.

    ``peak_confidence``: the highest window confidence since the caller last reset it. The
    VAD's states also want a smoothed volume over ``min_volume``, which rises 100-200 ms
    after Silero hears a voice; a barge-in hold needs the voice alone. ``narrowband``: Silero's
    8 kHz model hears each 16 kHz window too, every second sample (a phone line holds nothing
    over 4 kHz to fold back), and the more confident of the two counts: on telephone speech
    the 16 kHz model hears pauses the caller did not make, and the 8 kHz one misses quiet words.
    """

    def __init__(
        self,
        model: SileroOnnxModel,
        *,
        sample_rate: int,
        params: VADParams,
        narrowband: bool = False,
    ) -> None:
        super().__init__(model, sample_rate=sample_rate, params=params)
        self._narrow: SileroOnnxModel | None = None
        if narrowband and sample_rate == 2 * NARROWBAND_RATE:  # at 8 kHz it is the only one
            self._narrow = own_state(model)
        self.peak_confidence = 0.0

    @classmethod
    def for_turns(cls, model: SileroOnnxModel, vad: VadOptions, rate: int) -> SharedSileroVAD:
        """The VAD the options configure, at ``rate``."""
        params = VADParams(
            confidence=vad.confidence,
            min_volume=vad.min_volume,
            start_secs=vad.start_secs,
            stop_secs=vad.stop_secs,
        )
        analyzer = cls(model, sample_rate=rate, params=params, narrowband=vad.narrowband)
        analyzer.set_sample_rate(rate)
        return analyzer

    def voice_confidence(self, buffer: bytes) -> float:
        with cpu.job("vad", "vad"):  # on pipecat's analysis thread
            confidence = float(np.max(super().voice_confidence(buffer)))
            if self._narrow is not None:
                samples = np.frombuffer(buffer, dtype=np.int16)[::2].astype(np.float32) / 32768.0
                narrow = float(np.max(self._narrow(samples, NARROWBAND_RATE)))
                confidence = max(confidence, narrow)
        self.peak_confidence = max(self.peak_confidence, confidence)
        return confidence

    def state_reset(self) -> None:
        if self._narrow is not None:
            self._narrow.reset_states()
