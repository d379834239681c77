"""The default persona: what the LLM is told and what the bot says in words of its own, read
from the package's agent/personas/default.yaml."""

from pathlib import Path

import yaml

from agent.settings import LLMSettings, load_settings

PERSONA_FILE = Path(__file__).resolve().parents[1] / "agent" / "personas" / "default.yaml"


def test_the_default_persona_is_the_packaged_yaml(monkeypatch):
    """Every text of the file is the default of its setting, {bot_name} filled in, and the
    LLM's opening is built from them (the bytes were pinned when the texts moved here)."""
    monkeypatch.delenv("VOICE_AGENT_CONFIG", raising=False)
    persona = yaml.safe_load(PERSONA_FILE.read_text())
    assert set(persona) <= set(LLMSettings.model_fields)  # a misspelt key would be ignored
    llm = load_settings().llm

    def named(text: str) -> str:
        return text.replace("{bot_name}", persona["bot_name"])

    assert llm.bot_name == persona["bot_name"]
    assert "{bot_name}" in persona["system_prompt"] and llm.system_prompt == named(
        persona["system_prompt"]
    )
    assert llm.greeting == named(persona["greeting"])
    assert llm.retry_note == persona["retry_note"]
    assert llm.fallback_lines == [named(x) for x in persona["fallback_lines"]]
    assert llm.acknowledgement_lines == [named(x) for x in persona["acknowledgement_lines"]]
    examples = [m["content"] for m in llm.opening[1:]]
    assert examples == [named(x) for e in persona["examples"] for x in (e["caller"], e["answer"])]
    assert llm.opening[0] == {"role": "system", "content": llm.system_prompt}


def test_a_config_file_overrides_the_persona_text_by_text(tmp_path, monkeypatch):
    monkeypatch.delenv("VOICE_AGENT_CONFIG", raising=False)
    config = tmp_path / "agent.yaml"
    config.write_text("llm: {bot_name: Max, system_prompt: 'You are {bot_name}.'}\n")
    llm = load_settings(config).llm
    assert llm.system_prompt == "You are Max." and llm.greeting.startswith("Hi, this is Max.")
    assert llm.fallback_lines == load_settings().llm.fallback_lines  # the rest as packaged
