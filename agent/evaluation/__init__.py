"""``voice-agent eval``: a corpus of recorded turns with reference transcripts, replayed and graded.

What the agent heard (WER against faster-whisper's offline pass), when it spoke (turn
segmentation, cut-offs and voice-to-voice read off call.wav) and what it said (answer sanity).
"""
