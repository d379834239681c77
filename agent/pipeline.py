"""One call = one Pipecat pipeline, assembled from our processors around a pair of transports.

    transport in -> TurnDetector (Silero VAD + Smart Turn) -> StreamingWhisperSTT
    -> UserTurnAggregator -> StreamingLLM -> PhraseChunker -> [PhraseGuard] -> PiperTTS
    -> transport out -> SpokenTextAggregator

Models are loaded once per process (``AgentModels``) and shared by every call; the LLM
engine is started once (``llm_engine``) and shared too.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
from pipecat.observers.base_observer import BaseObserver
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.frame_processor import FrameProcessor
from pipecat.workers.runner import WorkerRunner

from agent import model_store
from agent.clock import CallClock
from agent.errors import UserError
from agent.llm.context import SpokenTextAggregator, UserTurnAggregator
from agent.llm.engines.chat import ChatEngine, InProcessLlama, OpenAIChatEngine
from agent.llm.engines.failover import failover_engine
from agent.llm.servers.llama import LlamaServer
from agent.llm.servers.vllm import VllmServer
from agent.llm.service import StreamingLLM, dated
from agent.recognition.streaming_stt import StreamingWhisperSTT
from agent.recognition.whisper_decoder import RATE, WhisperDecoder
from agent.settings import Settings
from agent.synthesis.chunker import PhraseChunker
from agent.synthesis.guard import PhraseGuard
from agent.synthesis.piper_tts import PiperTTS, PiperVoiceModel
from agent.timing import cpu
from agent.tools.knowledge import Knowledge
from agent.tools.runner import check_implementations
from agent.turns.detector import TurnDetector
from agent.turns.pipecat_compat import smart_turn_probability
from agent.turns.smart_turn import SMART_TURN_MAX_SECS
from agent.turns.vad import TurnModels


@dataclass
class AgentModels:
    """Models loaded once and shared by all calls of this process."""

    decoder: WhisperDecoder
    voice: PiperVoiceModel
    turn: TurnModels
    knowledge: Knowledge | None = None  # the documents' index (tools.knowledge_dir)

    @classmethod
    def load(cls, settings: Settings) -> AgentModels:
        folder = settings.tools.knowledge_dir
        knowledge = Knowledge(folder) if folder is not None else None  # a bad folder: first
        # each model's runtime starts its threads at load: a CPU profile counts them as its
        with cpu.owning("whisper"):
            decoder = WhisperDecoder.from_settings(settings.asr, settings.models_dir)
        with cpu.owning("piper"):
            voice = PiperVoiceModel.from_settings(settings.tts, settings.models_dir)
        with cpu.owning("smart_turn"):
            turn = TurnModels.load()
        models = cls(decoder=decoder, voice=voice, turn=turn, knowledge=knowledge)
        models.warm_up(settings.sample_rate)
        return models

    def warm_up(self, rate: int) -> None:
        """Run every model once at the sizes a call uses, before any call: a first run
        allocates and picks kernels, and the first turn must not pay for that."""
        self.voice.synthesize("Hello there, how can I help you today?", rate)
        rng = np.random.default_rng(0)
        for secs in (1.0, 4.0):  # an interim window and a whole short turn
            hiss = rng.normal(0, 0.003, int(secs * RATE)).astype(np.float32)
            self.decoder.transcribe(hiss, True)
        smart_turn_probability(
            self.turn.smart_turn, np.zeros(RATE * SMART_TURN_MAX_SECS, np.float32)
        )


@contextmanager
def llm_engine(settings: Settings) -> Iterator[ChatEngine]:
    """The chat engine of this process, shared by its calls.

    llama-inprocess (default: fastest TTFT here, see README), llama-server (llama.cpp's
    OpenAI-compatible server on loopback, started and stopped here), vllm (vLLM's server on
    loopback, started and stopped here) or openai (any OpenAI-compatible base URL). Each is
    wrapped in the failover policy (agent.llm.engines.failover).
    """
    s = settings.llm
    check_implementations(settings.tools.functions)
    tools = settings.tools.schemas
    if s.engine == "openai":
        if not s.base_url:
            raise UserError("llm.engine is 'openai' but no llm.base_url is set: pass --llm-url")
        engine = OpenAIChatEngine(s.base_url, s.model, s, server=s.base_url_server, tools=tools)
        yield failover_engine(engine, s)
        return
    if s.engine == "vllm":  # vLLM's OpenAI server from .venv-vllm, on loopback
        with VllmServer(s, settings.models_dir) as vllm:
            engine = OpenAIChatEngine(
                vllm.base_url, vllm.served_name, s, api_key=vllm.api_key, server="vllm",
                tools=tools,
            )  # fmt: skip
            yield failover_engine(engine, s)
        return
    gguf = model_store.resolve(s.model, "llm", settings.models_dir)
    if s.engine == "llama-inprocess":
        # prefilled at load with the opening the calls will send (today's date in it)
        with cpu.owning("llama"):
            engine = InProcessLlama(gguf, dated(s, settings.tools.today), tools)
        yield failover_engine(engine, s)
        return
    with LlamaServer(gguf, s) as server:  # restarted by the failover policy if it dies
        engine = OpenAIChatEngine(
            server.base_url, gguf.stem, s, api_key=server.api_key, server="llama-server",
            tools=tools,
        )  # fmt: skip
        yield failover_engine(engine, s, server=server)


def build_pipeline(
    transport_in: FrameProcessor,
    transport_out: FrameProcessor,
    *,
    models: AgentModels,
    engine: ChatEngine,
    settings: Settings,
    clock: CallClock,
    greeting: bool = False,
) -> Pipeline:
    """The processors of one call, in order; ``greeting``: the bot speaks first."""
    context = LLMContext()
    rate = settings.sample_rate
    return Pipeline(
        [
            transport_in,
            TurnDetector(settings.turn, models.turn, clock, rate=rate, words_judged=True),
            StreamingWhisperSTT(models.decoder, settings.asr, clock, rate=rate),
            UserTurnAggregator(context),
            StreamingLLM(
                engine,
                settings.llm,
                clock,
                greet=greeting,
                tools=settings.tools,
                knowledge=models.knowledge,
            ),  # fmt: skip
            PhraseChunker(
                first_min_words=settings.tts.first_phrase_min_words,
                min_words=settings.tts.phrase_min_words,
            ),
            *([PhraseGuard(settings.tts)] if settings.tts.guard else []),
            PiperTTS(models.voice, rate=rate),
            transport_out,
            SpokenTextAggregator(context),
        ]
    )


async def run_pipeline(
    pipeline: Pipeline, *, rate: int, observers: list[BaseObserver] | None = None
) -> None:
    """Run one call's pipeline until it ends (its input pushes an EndWorkerFrame upstream)."""
    worker = PipelineWorker(
        pipeline,
        params=PipelineParams(audio_in_sample_rate=rate, audio_out_sample_rate=rate),
        observers=observers or [],
        idle_timeout_secs=None,
        enable_rtvi=False,
    )
    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    await runner.run()
