import os
import subprocess
import sys

import pytest
import yaml

from agent.errors import UserError
from agent.settings import load_settings


def test_defaults_work_offline(monkeypatch):
    monkeypatch.delenv("VOICE_AGENT_CONFIG", raising=False)
    s = load_settings()
    assert s.llm.engine == "llama-inprocess" and s.asr.model == "whisper-tiny.en"
    assert s.sample_rate == 16000


def test_precedence_flags_over_env_over_file(tmp_path, monkeypatch):
    config = tmp_path / "agent.yaml"
    config.write_text("llm: {max_tokens: 20, temperature: 0.5}\nturn: {max_silence_secs: 2}\n")
    monkeypatch.setenv("VOICE_AGENT_LLM__MAX_TOKENS", "30")
    monkeypatch.setenv("VOICE_AGENT_MODELS", str(tmp_path / "m"))
    s = load_settings(config, llm={"temperature": 0.1})
    assert s.llm.max_tokens == 30  # env beats file
    assert s.llm.temperature == 0.1  # flag beats file
    assert s.turn.max_silence_secs == 2  # file beats default
    assert s.models_dir == tmp_path / "m"


def test_the_config_file_is_for_the_one_call_that_names_it(tmp_path, monkeypatch):
    monkeypatch.delenv("VOICE_AGENT_CONFIG", raising=False)
    config = tmp_path / "agent.yaml"
    config.write_text("llm: {max_tokens: 21}\n")
    assert load_settings(config).llm.max_tokens == 21
    assert "VOICE_AGENT_CONFIG" not in os.environ  # nothing travels to later settings
    assert load_settings().llm.max_tokens != 21
    monkeypatch.setenv("VOICE_AGENT_CONFIG", str(config))  # the user's own variable is read
    assert load_settings().llm.max_tokens == 21


def test_null_in_the_environment_turns_an_option_off(monkeypatch):
    monkeypatch.delenv("VOICE_AGENT_CONFIG", raising=False)
    assert load_settings().turn.lull_pass_ms is not None
    monkeypatch.setenv("VOICE_AGENT_TURN__LULL_PASS_MS", "null")
    assert load_settings().turn.lull_pass_ms is None


def test_a_list_in_the_environment_that_is_not_json_is_one_clear_error(monkeypatch):
    monkeypatch.delenv("VOICE_AGENT_CONFIG", raising=False)
    monkeypatch.setenv("VOICE_AGENT_LLM__FALLBACK_LINES", "Sorry?")
    with pytest.raises(UserError, match="field \"llm\".*written as JSON"):
        load_settings()
    monkeypatch.setenv("VOICE_AGENT_LLM__FALLBACK_LINES", '["Sorry?"]')
    assert load_settings().llm.fallback_lines == ["Sorry?"]


def test_a_phone_call_has_its_own_lean_threshold_and_narrowband_vad(monkeypatch):
    monkeypatch.delenv("VOICE_AGENT_CONFIG", raising=False)
    monkeypatch.setenv("VOICE_AGENT_TURN__SMART_TURN_LEAN", "0.4")
    monkeypatch.setenv("VOICE_AGENT_TURN__PHONE_SMART_TURN_LEAN", "0.15")
    s = load_settings()
    phone = s.for_phone()
    assert (s.turn.smart_turn_lean, phone.turn.smart_turn_lean) == (0.4, 0.15)
    assert (s.turn.narrowband_vad, phone.turn.narrowband_vad) == (False, True)
    wide_again = {"smart_turn_lean": 0.4, "narrowband_vad": False}
    assert phone.turn.model_copy(update=wide_again) == s.turn  # nothing else
    monkeypatch.setenv("VOICE_AGENT_TURN__PHONE_SMART_TURN_LEAN", "null")
    monkeypatch.setenv("VOICE_AGENT_TURN__PHONE_NARROWBAND_VAD", "false")
    turn = load_settings().for_phone().turn
    assert (turn.smart_turn_lean, turn.narrowband_vad) == (0.4, False)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("llm: {max_tokens: -1}", "llm.max_tokens"),
        ("llm: {engine: magic}", "llm.engine"),
        ("nonsense_key: 1", "nonsense_key"),
        ("[1, 2]", "must hold a mapping"),
        ("llm: {max_tokens: 1", "not valid YAML"),
        ("llm: {max_tokens: 40}\nllm: {}\n", "the key 'llm' twice.*line 2"),
        ("? [1, 2]\n: 3\n", "not valid YAML.*unhashable key"),
    ],
)
def test_bad_config_is_one_clear_error(tmp_path, monkeypatch, text, message):
    monkeypatch.delenv("VOICE_AGENT_CONFIG", raising=False)
    config = tmp_path / "bad.yaml"
    config.write_text(text)
    with pytest.raises(UserError, match=message):
        load_settings(config)


def test_config_command_prints_effective_settings_and_rejects_bad_env(tmp_path):
    env = {"VOICE_AGENT_LLM__MAX_TOKENS": "17", "PATH": ""}
    run = [sys.executable, "-m", "agent.cli", "config"]
    done = subprocess.run(run, capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert yaml.safe_load(done.stdout)["llm"]["max_tokens"] == 17
    bad = subprocess.run(
        run, capture_output=True, text=True, env={"VOICE_AGENT_LLM__MAX_TOKENS": "lots"}
    )
    assert bad.returncode == 2
    assert "llm.max_tokens" in bad.stderr and "Traceback" not in bad.stderr


def test_config_prints_no_secret(tmp_path):
    """The API key and a URL's password are secrets: `voice-agent config` masks them."""
    env = {**os.environ, "VOICE_AGENT_LLM__API_KEY": "sk-x",
           "VOICE_AGENT_LLM__BASE_URL": "https://bob:hunter2-pw@llm.example/v1",
           "VOICE_AGENT_SERVE__TWILIO_AUTH_TOKEN": "twilio-secret-tok"}  # fmt: skip
    env.pop("VOICE_AGENT_CONFIG", None)
    done = subprocess.run([sys.executable, "-m", "agent.cli", "config"], capture_output=True,
                          text=True, env=env, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    shown = yaml.safe_load(done.stdout)
    assert shown["llm"]["api_key"] == "**********"
    assert shown["llm"]["base_url"] == "https://bob:**********@llm.example/v1"
    for secret in ("sk-x", "hunter2-pw", "twilio-secret-tok"):
        assert secret not in done.stdout + done.stderr


def test_serve_and_retention_are_groups_and_the_old_flat_names_still_work(tmp_path, monkeypatch):
    """``serve.*`` and ``retention.*`` are typed groups; ``VOICE_AGENT_SERVE_TOKEN`` and a flat
    ``calls_max_count`` key (the names before the groups) still set them, under the new ones."""
    for name in [n for n in os.environ if n.startswith(("VOICE_AGENT_SERVE", "VOICE_AGENT_CALLS"))]:
        monkeypatch.delenv(name)
    config = tmp_path / "config.yaml"
    config.write_text("calls_max_count: 7\nretention: {max_age_days: 2}\nserve_max_calls: 5\n")
    monkeypatch.setenv("VOICE_AGENT_SERVE_TOKEN", "old-spelling-token-0123")
    monkeypatch.setenv("VOICE_AGENT_SERVE_ALLOWED_ORIGINS", '["https://a.example"]')
    monkeypatch.setenv("VOICE_AGENT_CALLS_MAX_BYTES", "1MiB")
    monkeypatch.setenv("VOICE_AGENT_SERVE__MAX_CALLS", "3")  # the new name beats the file
    settings = load_settings(config)
    assert settings.serve.token.get_secret_value() == "old-spelling-token-0123"
    assert settings.serve.allowed_origins == ["https://a.example"]
    assert settings.serve.max_calls == 3
    assert (settings.retention.max_count, settings.retention.max_age_days) == (7, 2)
    assert settings.retention.max_bytes == 1024**2
    monkeypatch.setenv("VOICE_AGENT_SERVE__TOKEN", "new-spelling-token-0123")
    assert load_settings(config).serve.token.get_secret_value() == "new-spelling-token-0123"
    assert load_settings(serve={"max_calls": 9}).serve.max_calls == 9
