"""Benchmarks (``python -m benchmarks.<name>`` from a checkout) and the helpers only they and
the tests need, kept out of the shipped ``agent`` package so it carries no measuring code."""
