"""Real-time cascaded voice agent: streaming Whisper -> small LLM -> Piper, timed turn by turn."""

import os

# Pipecat logs every frame hop at DEBUG through loguru; keep our command line, scripts and
# tests readable unless the user asks for more (LOGURU_LEVEL=DEBUG). Must precede loguru.
os.environ.setdefault("LOGURU_LEVEL", "WARNING")

__version__ = "0.1.0"
