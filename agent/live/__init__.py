"""Live callers: a websocket server (phone bridge, browser page) and the local microphone.

Every connection is one call with its own pipeline (``agent.pipeline.build_pipeline``);
models and the LLM engine are loaded once per process and shared by all calls.
"""
