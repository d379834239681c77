"""Tests of agent/timing/."""
