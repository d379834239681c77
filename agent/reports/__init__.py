"""Latency reports for QA: Markdown, HTML with charts, budget gate, run comparison."""
