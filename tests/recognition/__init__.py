"""Tests of agent/recognition/."""
