"""The default persona: what the LLM is told and what the bot says in its own words."""

import hashlib
import json

from agent.settings import load_settings


def test_the_default_persona_is_the_one_the_llm_always_got(monkeypatch):
    """Pinned while the persona texts move out of settings.py: the same bytes, or the prompt
    cache and every measured conversation would be about another prompt."""
    monkeypatch.delenv("VOICE_AGENT_CONFIG", raising=False)
    s = load_settings().llm
    persona = {"opening": s.opening, "greeting": s.greeting, "retry_note": s.retry_note,
               "fallback_lines": s.fallback_lines,
               "acknowledgement_lines": s.acknowledgement_lines}  # fmt: skip
    digest = hashlib.sha256(json.dumps(persona).encode()).hexdigest()
    assert digest == "80affa9e1e7db14b77bd5f096f1a2a8d9465b5f80089470b40ad1ecc9fd62047"
