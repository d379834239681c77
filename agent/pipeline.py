"""One call = one Pipecat pipeline, assembled from our processors around a pair of transports.

    transport in -> TurnDetector (Silero VAD + Smart Turn) -> StreamingWhisperSTT
    -> UserTurnAggregator -> OpenAIStreamingLLM -> PhraseChunker -> PiperTTS
    -> transport out -> SpokenTextAggregator

Models are loaded once per process (``AgentModels``) and shared by every call; the LLM
engine is started once (``llm_engine``) and shared too.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from pipecat.pipeline.pipeline import Pipeline
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.frame_processor import FrameProcessor

from agent import model_store
from agent.clock import CallClock
from agent.errors import UserError
from agent.llm.context import SpokenTextAggregator, UserTurnAggregator
from agent.llm.engine import LlamaServer
from agent.llm.service import OpenAIStreamingLLM
from agent.recognition.streaming_stt import StreamingWhisperSTT
from agent.recognition.turn_detector import TurnDetector
from agent.recognition.whisper_decoder import WhisperDecoder
from agent.settings import Settings
from agent.synthesis.chunker import PhraseChunker
from agent.synthesis.piper_tts import PiperTTS, PiperVoiceModel


@dataclass
class LLMEndpoint:
    base_url: str
    model: str


@dataclass
class AgentModels:
    """Models loaded once and shared by all calls of this process."""

    decoder: WhisperDecoder
    voice: PiperVoiceModel

    @classmethod
    def load(cls, settings: Settings) -> AgentModels:
        asr_path = model_store.resolve(settings.asr.model, "asr", settings.models_dir)
        voice_path = model_store.resolve(settings.tts.voice, "tts", settings.models_dir)
        decoder = WhisperDecoder(
            asr_path,
            compute_type=settings.asr.compute_type,
            threads=settings.asr.threads,
            language=settings.asr.language,
        )
        voice = PiperVoiceModel(voice_path, length_scale=settings.tts.length_scale)
        voice.synthesize("Ready.", settings.sample_rate)  # first ONNX run is slow: do it now
        return cls(decoder=decoder, voice=voice)


@contextmanager
def llm_engine(settings: Settings) -> Iterator[LLMEndpoint]:
    """The LLM endpoint for this process: the embedded llama.cpp server, or a given URL."""
    s = settings.llm
    if s.engine == "openai":
        if not s.base_url:
            raise UserError("llm.engine is 'openai' but no llm.base_url is set: pass --llm-url")
        yield LLMEndpoint(base_url=s.base_url, model=s.model)
        return
    gguf = model_store.resolve(s.model, "llm", settings.models_dir)
    with LlamaServer(gguf, s) as server:
        yield LLMEndpoint(base_url=server.base_url, model=gguf.stem)


def build_pipeline(
    transport_in: FrameProcessor,
    transport_out: FrameProcessor,
    *,
    models: AgentModels,
    endpoint: LLMEndpoint,
    settings: Settings,
    clock: CallClock,
) -> Pipeline:
    """The processors of one call, in order."""
    context = LLMContext()
    rate = settings.sample_rate
    return Pipeline(
        [
            transport_in,
            TurnDetector(settings.turn, clock, rate=rate),
            StreamingWhisperSTT(models.decoder, settings.asr, clock, rate=rate),
            UserTurnAggregator(context),
            OpenAIStreamingLLM(endpoint.base_url, endpoint.model, settings.llm, clock),
            PhraseChunker(
                first_min_words=settings.tts.first_phrase_min_words,
                min_words=settings.tts.phrase_min_words,
            ),
            PiperTTS(models.voice, rate=rate),
            transport_out,
            SpokenTextAggregator(context),
        ]
    )
