"""Tests of agent/llm/."""
