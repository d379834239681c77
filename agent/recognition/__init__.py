"""Voice activity, end-of-turn detection and streaming speech recognition."""
