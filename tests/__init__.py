"""The test suite: one folder per room of ``agent/``; shared helpers in tests/support/."""
