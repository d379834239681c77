"""Tests of agent/live/."""
