"""Streaming speech recognition: what the caller said, pass by pass."""
