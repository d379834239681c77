"""Real-time cascaded voice agent: streaming Whisper -> small LLM -> Piper, timed turn by turn."""

__version__ = "0.1.0"
