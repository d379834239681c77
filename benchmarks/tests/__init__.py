"""Tests of the benchmarks themselves (collected with the suite: pyproject testpaths)."""
