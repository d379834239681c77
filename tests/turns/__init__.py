"""Tests of agent/turns/."""
