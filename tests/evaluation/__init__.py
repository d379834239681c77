"""Tests of agent/evaluation/."""
