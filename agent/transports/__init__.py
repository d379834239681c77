"""Where call audio enters and leaves the pipeline (replayed files, microphone, websockets)."""
