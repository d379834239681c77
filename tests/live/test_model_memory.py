"""Model memory in a serving process: work that varies from call to call must not pile up.

Each check runs in a child process, so that its resident memory is the model's alone.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
PRELUDE = """
from agent.live.process_memory import settle_heap
settle_heap()  # a serving process's heap, set before any thread starts
import os
from pathlib import Path

import numpy as np
from agent import model_store
from agent.audio import load_audio
from tests.support.memory import tree_rss_kib
from agent.settings import Settings

settings = Settings()

def rss():
    print(tree_rss_kib(os.getpid()) // 1024, flush=True)
"""
WHISPER = """
from concurrent.futures import ThreadPoolExecutor

from agent.recognition.whisper_decoder import PASSES_AT_ONCE, RATE, WhisperDecoder

path = model_store.resolve(settings.asr.model, "asr", settings.models_dir)
decoder = WhisperDecoder(path, compute_type="int8", threads=2, language="en")
audio = (load_audio(Path("agent/samples/jfk_part2.wav"), RATE) / 32768).astype(np.float32)
audio = np.concatenate([audio, audio])  # over the 10 s every pass reads: each length is new
# the longest first, on every worker at once (each worker thread has its own malloc arena,
# and a sequence of single passes reaches the second one at random), so buffers are at
# their largest from the start
with ThreadPoolExecutor(PASSES_AT_ONCE) as workers:
    list(workers.map(decoder.transcribe, [audio] * PASSES_AT_ONCE))
# then every pass a new length
for i, n in enumerate(np.linspace(len(audio), int(10.5 * RATE), 60).astype(int)):
    decoder.transcribe(audio[:n])
    if i == 9:
        rss()
rss()
"""
PIPER = """
import random
from concurrent.futures import ThreadPoolExecutor
from agent.synthesis.piper_tts import PiperVoiceModel

voice = PiperVoiceModel.from_settings(settings.tts, settings.models_dir)
voice.synthesize("Ready.", 16000)
rss()
words = "sorry I can help you find a new home in the stars today with that".split()
phrases = [" ".join(random.Random(i).choices(words, k=24)) + "." for i in range(16)]
with ThreadPoolExecutor(4) as calls:  # four calls synthesising side by side
    list(calls.map(lambda text: voice.synthesize(text, 16000), phrases))
rss()
"""


def child_rss_mib(code: str) -> list[int]:
    """Run ``code`` after PRELUDE in a fresh interpreter; the RSS values it printed (MiB)."""
    env = {k: v for k, v in os.environ.items() if k != "ONEDNN_PRIMITIVE_CACHE_CAPACITY"}
    done = subprocess.run(
        [sys.executable, "-c", PRELUDE + code],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return [int(line) for line in done.stdout.split()]


def test_fifty_recognition_passes_of_new_lengths_grow_memory_by_a_few_mib_at_most():
    after_10, after_all = child_rss_mib(WHISPER)
    # oneDNN's default cache kept a compiled convolution per length: about 0.85 MiB a pass
    # (windows over 10 s of new lengths: +77 MiB over these 50 with the cache at 1024)
    assert after_all - after_10 < 15


def test_phrases_synthesised_side_by_side_leave_no_arena_behind():
    ready, after = child_rss_mib(PIPER)
    # onnxruntime's arena kept the peak of the runs in flight together: 354-371 MiB more
    # (measured without the shrinking run option); with it 73-136 MiB (a fresh-clone run
    # failed a bound of 100)
    assert after - ready < 200
