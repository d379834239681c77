"""A stock Pipecat pipeline with our local models, as the baseline for benchmarks/turns.py.

Only Pipecat's own services with their documented defaults: segmented WhisperSTTService,
the universal LLMContextAggregatorPair (Silero VAD and Pipecat's default turn strategies,
which include the local Smart Turn v3 model), OpenAILLMService against a llama.cpp server,
PiperTTSService. What differs from a copy-pasted example is only what keeps it offline and
comparable: local model files instead of hub names, the same system prompt and answer cap
as ours, and our replay transports so both pipelines record a call.wav on one timeline.
"""

from __future__ import annotations

from pathlib import Path

from pipecat.audio.vad.silero import SileroVADAnalyzer
from pipecat.pipeline.pipeline import Pipeline
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import (
    LLMContextAggregatorPair,
    LLMUserAggregatorParams,
)
from pipecat.processors.frame_processor import FrameProcessor
from pipecat.services.openai.llm import OpenAILLMService
from pipecat.services.piper.tts import PiperTTSService
from pipecat.services.whisper.stt import WhisperSTTService


def build_stock_pipeline(
    transport_in: FrameProcessor,
    transport_out: FrameProcessor,
    *,
    whisper_dir: Path,
    piper_voice: Path,
    llm_base_url: str,
    llm_api_key: str,
    llm_model: str,
    system_prompt: str,
    max_tokens: int,
) -> Pipeline:
    """transport in -> STT -> user aggregator -> LLM -> TTS -> transport out -> assistant agg.

    ``piper_voice`` is a local ``.onnx`` voice: PiperTTSService looks for
    ``download_dir / (voice + ".onnx")`` and downloads only when that file is missing, so
    pointing ``download_dir`` at the voice's folder keeps it offline.
    """
    stt = WhisperSTTService(
        device="cpu",
        compute_type="int8",
        settings=WhisperSTTService.Settings(model=str(whisper_dir)),
    )
    llm = OpenAILLMService(
        api_key=llm_api_key,
        base_url=llm_base_url,
        settings=OpenAILLMService.Settings(
            model=llm_model, system_instruction=system_prompt, max_tokens=max_tokens
        ),
    )
    tts = PiperTTSService(
        download_dir=piper_voice.parent,
        settings=PiperTTSService.Settings(voice=piper_voice.name.removesuffix(".onnx")),
    )
    context = LLMContext()
    aggregators = LLMContextAggregatorPair(
        context, user_params=LLMUserAggregatorParams(vad_analyzer=SileroVADAnalyzer())
    )
    return Pipeline(
        [
            transport_in,
            stt,
            aggregators.user(),
            llm,
            tts,
            transport_out,
            aggregators.assistant(),
        ]
    )
