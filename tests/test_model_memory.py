"""Recognition memory: passes over ever new audio lengths must not pile up memory.

Run in a child process so that its resident memory is the recogniser's alone.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import SAMPLES

PASSES = 60
CHILD = f"""
import numpy as np
from agent import model_store
from agent.audio import load_audio
from agent.live.process_memory import tree_rss_kib
from agent.recognition.whisper_decoder import RATE, WhisperDecoder
from agent.settings import Settings

settings = Settings()
path = model_store.resolve(settings.asr.model, "asr", settings.models_dir)
decoder = WhisperDecoder(path, compute_type="int8", threads=2, language="en")
audio = load_audio(SAMPLES / "jfk_part2.wav", RATE).astype(np.float32) / 32768
# every pass a new length; the longest first, so buffers are at their largest from the start
lengths = np.linspace(len(audio), RATE, {PASSES}).astype(int)
for i, n in enumerate(lengths):
    decoder.transcribe(audio[:n])
    if i == 9:
        print(tree_rss_kib(os.getpid()))
print(tree_rss_kib(os.getpid()))
"""


def rss_growth_mib(env: dict[str, str]) -> float:
    code = f"import os\nfrom pathlib import Path\nSAMPLES = Path({str(SAMPLES)!r})\n{CHILD}"
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=Path(__file__).resolve().parents[1],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    after_10, after_all = (int(line) for line in done.stdout.split())
    return (after_all - after_10) / 1024


def test_fifty_passes_of_new_lengths_grow_memory_by_a_few_mib_at_most():
    env = {k: v for k, v in os.environ.items() if k != "ONEDNN_PRIMITIVE_CACHE_CAPACITY"}
    # oneDNN's default cache kept a compiled convolution per length: about 0.85 MiB a pass
    assert rss_growth_mib(env) < 15
