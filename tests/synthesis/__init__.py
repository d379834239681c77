"""Tests of agent/synthesis/."""
