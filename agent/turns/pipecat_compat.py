"""Pipecat's private members that turn-taking needs, reached from here alone (pipecat 1.14).

Pipecat offers no public way to share one Silero session between calls, nor to ask Smart
Turn for its probability on audio of our choosing; when an upgrade renames these members,
this module is the one to change.
"""

from __future__ import annotations

import copy

import numpy as np
from pipecat.audio.turn.smart_turn.local_smart_turn_v3 import LocalSmartTurnAnalyzerV3
from pipecat.audio.vad.silero import SileroOnnxModel, SileroVADAnalyzer
from pipecat.audio.vad.vad_analyzer import VADAnalyzer, VADParams


def bundled_silero() -> SileroOnnxModel:
    """The ONNX session of the Silero model that pipecat ships."""
    return SileroVADAnalyzer()._model  # the constructor finds the bundled file


def smart_turn_probability(smart_turn: LocalSmartTurnAnalyzerV3, audio: np.ndarray) -> float:
    """Smart Turn's probability that the turn is complete, on float audio in [-1, 1] at 16 kHz
    (at most its 8 s window is heard)."""
    return float(smart_turn._predict_endpoint(audio)["probability"])


class SessionSileroVAD(SileroVADAnalyzer):
    """Silero's VAD analyzer on a session loaded elsewhere, with a recurrent state of its own
    (``copy.copy`` keeps the session and resets the state); ``state_reset`` is called each
    time pipecat resets that state."""

    def __init__(self, model: SileroOnnxModel, *, sample_rate: int, params: VADParams) -> None:
        VADAnalyzer.__init__(self, sample_rate=sample_rate, params=params)  # no model loaded
        self._model = own_state(model)
        self._windows_since_reset = 0
        self._low_confidence_windows = 0

    def state_reset(self) -> None:
        """Pipecat has just reset the model's state."""

    def _maybe_reset_model(self, confidence: float) -> None:
        super()._maybe_reset_model(confidence)
        if self._windows_since_reset == 0:  # reset just now
            self.state_reset()


def own_state(model: SileroOnnxModel) -> SileroOnnxModel:
    """The same ONNX session with a fresh recurrent state of its own."""
    mine = copy.copy(model)
    mine.reset_states()
    return mine
