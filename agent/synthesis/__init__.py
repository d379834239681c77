"""Token stream -> speakable phrases -> Piper audio."""
