"""tts.threads reaches Piper's onnxruntime session (the thread benchmark depends on it)."""

from __future__ import annotations

import pytest

from agent.pipeline import AgentModels
from agent.settings import Settings

pytestmark = pytest.mark.slow


def test_tts_threads_setting_sets_the_onnxruntime_session_and_the_voice_still_speaks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("VOICE_AGENT_TTS__THREADS", "1")
    models = AgentModels.load(Settings())
    options = models.voice.voice.session.get_session_options()
    assert options.intra_op_num_threads == 1
    audio = models.voice.synthesize("Hello there, how can I help?", 16000)
    assert len(audio) > 16000 // 2 and abs(audio).max() > 1000


def test_without_tts_threads_onnxruntime_keeps_its_default() -> None:
    models = AgentModels.load(Settings())
    options = models.voice.voice.session.get_session_options()
    assert options.intra_op_num_threads == 0
    # Idle threads do not spin: they would take the cores from llama.cpp decoding beside them.
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"
