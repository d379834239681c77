"""Tests of agent/reports/."""
