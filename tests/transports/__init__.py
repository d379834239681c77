"""Tests of agent/transports/."""
