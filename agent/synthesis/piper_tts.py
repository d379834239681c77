"""Piper TTS for Pipecat: a local voice file, synthesis off the event loop, phrase by phrase.

Phrases are synthesised in order on one worker thread while earlier ones play. Each
phrase's audio is resampled to the pipeline rate (soxr) and pushed as soon as it is ready,
followed by its ``TTSTextFrame``; the output transport releases that text only once the
audio before it has been written, so the assistant context holds what was actually spoken.
A barge-in drops the queued phrases.

A held speculative answer's first phrase (``FirstPhraseAheadFrame``) is synthesised at once;
if the answer is confirmed, that phrase's audio is ready when it comes, and the caller no
longer waits for synthesis after the end of the turn. A dropped answer's audio is never
pushed (the phrase never comes), only its synthesis time is lost.

A phrase the voice fails on is skipped (a ``StageErrorFrame`` records it in the turn) and
the phrases after it are still spoken; an answer left with no audio at all ends with a
``NoReplyFrame``, so the call moves on to the caller's next turn instead of waiting for
audio that will never come.
"""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import onnxruntime
import soxr
from pipecat.frames.frames import (
    CancelFrame,
    EndFrame,
    Frame,
    InterruptionFrame,
    LLMFullResponseEndFrame,
    TTSAudioRawFrame,
    TTSStartedFrame,
    TTSStoppedFrame,
    TTSTextFrame,
)
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from piper import PiperConfig, PiperVoice, SynthesisConfig

from agent import model_store
from agent.errors import error_line
from agent.frames import (
    FirstPhraseAheadFrame,
    FirstPhraseSynthesisFrame,
    NoReplyFrame,
    PhraseFrame,
    StageErrorFrame,
)
from agent.settings import TTSSettings
from agent.timing import cpu


def load_voice(voice_path: Path, threads: int | None = None) -> PiperVoice:
    """A Piper voice on the CPU with ``threads`` onnxruntime intra-op threads.

    ``PiperVoice.load`` takes no session options, so the session is built here the way it
    builds it (CPU provider, the ``.onnx.json`` beside the model), plus the thread count:
    on a 2-core machine Piper's threads compete with llama.cpp decoding the rest of the
    answer while the first phrase is synthesised. None keeps onnxruntime's default.

    Memory patterns are off: onnxruntime keeps one per input shape and every phrase has its
    own length, so a serving process would grow without bound. Its threads do not spin while
    idle, which would take the cores from llama.cpp decoding beside it. Figures:
    docs/decisions.md, "Memory" and "Synthesis".
    """
    options = onnxruntime.SessionOptions()
    options.enable_mem_pattern = False
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if threads is not None:
        options.intra_op_num_threads = threads
    config = json.loads(Path(f"{voice_path}.json").read_text(encoding="utf-8"))
    session = onnxruntime.InferenceSession(
        str(voice_path), sess_options=options, providers=["CPUExecutionProvider"]
    )
    return PiperVoice(session=ShrinkingSession(session), config=PiperConfig.from_dict(config))


class ShrinkingSession:
    """An onnxruntime session whose every run hands its arena's spare memory back at the end.

    Why: the arena would otherwise keep the largest demand of the runs that were ever in
    flight together (every call synthesises on the one voice); docs/decisions.md, "Memory".
    ``PiperVoice`` calls ``run(None, inputs)``; everything else goes to the session.
    """

    def __init__(self, session: onnxruntime.InferenceSession) -> None:
        self._session = session
        self._options = onnxruntime.RunOptions()
        self._options.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")

    def run(
        self, output_names: list[str] | None, input_feed: dict, run_options: object = None
    ) -> list:
        return self._session.run(output_names, input_feed, self._options)

    def __getattr__(self, name: str) -> object:
        return getattr(self._session, name)


class PiperVoiceModel:
    """A loaded Piper voice that synthesises one phrase to int16 audio at a target rate."""

    def __init__(
        self,
        voice_path: Path,
        *,
        length_scale: float = 1.0,
        threads: int | None = None,
        noise_w_scale: float | None = None,
    ) -> None:
        self.voice = load_voice(voice_path, threads)
        self.rate = self.voice.config.sample_rate
        self._config = SynthesisConfig(length_scale=length_scale, noise_w_scale=noise_w_scale)

    @classmethod
    def from_settings(cls, tts: TTSSettings, models_dir: Path) -> PiperVoiceModel:
        """The voice the settings name (a default voice or a Piper .onnx), tuned as they say:
        the one loader calls, benchmarks and tests share."""
        return cls(
            model_store.resolve(tts.voice, "tts", models_dir),
            length_scale=tts.length_scale,
            threads=tts.threads,
            noise_w_scale=tts.noise_w_scale,
        )

    def synthesize(self, text: str, out_rate: int) -> np.ndarray:
        chunks = [c.audio_int16_array for c in self.voice.synthesize(text, self._config)]
        if not chunks:
            return np.zeros(0, dtype=np.int16)
        audio = np.concatenate(chunks)
        if self.rate != out_rate:
            audio = soxr.resample(audio, self.rate, out_rate, quality="HQ")
        return audio.astype(np.int16)


class PiperTTS(FrameProcessor):
    """PhraseFrames in, TTSAudioRawFrames out, in phrase order."""

    def __init__(self, voice: PiperVoiceModel, *, rate: int) -> None:
        super().__init__()
        self._voice = voice
        self._rate = rate
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="piper")
        self._queue: asyncio.Queue[Frame] = asyncio.Queue()
        self._worker: asyncio.Task | None = None
        self._speaking = False
        self._answer_failed = False  # a phrase of the current answer could not be spoken
        self._ahead: tuple[str, asyncio.Task] | None = None  # a held answer's first phrase

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, FirstPhraseAheadFrame):
            self._ahead = (frame.text, self.create_task(self._synthesize_first(frame.text)))
            return
        if isinstance(frame, PhraseFrame | LLMFullResponseEndFrame):
            if self._worker is None:
                self._worker = self.create_task(self._work())
            await self._queue.put(frame)
            return
        if isinstance(frame, InterruptionFrame | EndFrame | CancelFrame):
            await self._drop_queue()
        await self.push_frame(frame, direction)

    async def _drop_queue(self) -> None:
        if self._worker is not None:
            await self.cancel_task(self._worker)
            self._worker = None
        self._queue = asyncio.Queue()
        self._speaking = False
        self._answer_failed = False
        self._ahead = None

    async def _work(self) -> None:
        while True:
            frame = await self._queue.get()
            if isinstance(frame, LLMFullResponseEndFrame):
                if self._speaking:
                    await self.push_frame(TTSStoppedFrame())
                    self._speaking = False
                elif self._answer_failed:  # nothing of this answer will be heard
                    await self.push_frame(NoReplyFrame(), FrameDirection.UPSTREAM)
                self._answer_failed = False
                await self.push_frame(frame)
                continue
            assert isinstance(frame, PhraseFrame)
            ahead, self._ahead = self._ahead, None
            try:
                if self._speaking:
                    audio = await self._synthesize(frame.text)
                else:
                    ready = ahead is not None and ahead[0] == frame.text
                    audio = await ahead[1] if ready else None  # None if it failed: again
                    if audio is None:
                        audio = await self._synthesize_first(frame.text)
            except Exception as exc:  # noqa: BLE001 - one bad phrase must not end the call
                self._answer_failed = True
                await self.push_frame(StageErrorFrame(stage="tts", error=error_line(exc)))
                continue
            if not self._speaking:
                await self.push_frame(TTSStartedFrame())
                self._speaking = True
            await self.push_frame(
                TTSAudioRawFrame(audio=audio.tobytes(), sample_rate=self._rate, num_channels=1)
            )
            await self.push_frame(TTSTextFrame(text=frame.text, text_type="sentence"))

    async def _synthesize(self, text: str) -> np.ndarray:
        """One phrase on the synthesis thread (phrases are synthesised one at a time)."""
        return await asyncio.get_running_loop().run_in_executor(
            self._executor, cpu.marked("tts", "piper", self._voice.synthesize), text, self._rate
        )

    async def _synthesize_first(self, text: str) -> np.ndarray:
        """An answer's first phrase: the LLM stage pauses decoding meanwhile."""
        await self.push_frame(FirstPhraseSynthesisFrame(busy=True), FrameDirection.UPSTREAM)
        try:
            return await self._synthesize(text)
        finally:
            await self.push_frame(FirstPhraseSynthesisFrame(busy=False), FrameDirection.UPSTREAM)

    async def cleanup(self) -> None:
        await super().cleanup()
        self._executor.shutdown(wait=False, cancel_futures=True)
