"""The settings reference (`voice-agent config --explain`, docs/settings.md): every setting
described, with a default, an environment variable that really sets it and its knob mark."""

import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import AliasChoices, BaseModel, ByteSize, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict
from typer.testing import CliRunner

from agent.cli.config import MARKDOWN_COMMAND, markdown, setting_groups
from agent.cli.main import app
from agent.errors import UserError
from agent.settings import KNOB, load_settings

DOCS = Path(__file__).resolve().parents[1] / "docs" / "settings.md"
SETTINGS = [s for group in setting_groups() for s in group.settings]
# One run's figures belong in docs with their command, not in what a setting is for.
FIGURES = re.compile(r"\bp(50|95)\b|\d\s?(ms|%)(\W|$)|percent", re.IGNORECASE)


def test_every_setting_says_what_it_is_for_without_a_runs_figures():
    assert len(SETTINGS) > 90  # the walk reached every group
    assert [s.name for s in SETTINGS if not s.description] == []
    assert [s.name for s in SETTINGS if FIGURES.search(s.description)] == []
    assert [g.name for g in setting_groups() if not g.about] == []


def _value(data: dict[str, Any], dotted: str) -> Any:
    for part in dotted.split("."):
        data = data[part]
    return data


@pytest.mark.parametrize("setting", SETTINGS, ids=[s.name for s in SETTINGS])
def test_each_environment_variable_sets_its_setting(setting, monkeypatch):
    """``null`` or an unparsable value either changes the setting or is refused naming its
    group; a wrong variable name would be silently ignored, and fail here."""
    monkeypatch.delenv("VOICE_AGENT_CONFIG", raising=False)
    before = _value(load_settings().model_dump(), setting.name)
    for probe in ("null", "["):
        monkeypatch.setenv(setting.env, probe)
        try:
            after = _value(load_settings().model_dump(), setting.name)
        except UserError as exc:
            assert setting.name.split(".")[0] in str(exc) or setting.env in str(exc)
            return
        if after != before:
            return
    pytest.fail(f"{setting.env} does not set {setting.name}")


class _Deepest(BaseModel):
    """The innermost group."""

    depth: int = Field(3, description="how deep", json_schema_extra=KNOB)


class _Group(BaseModel):
    """A group of its own.

    More words that the reference leaves out."""

    token: SecretStr | None = Field(None, description="a secret")
    inner: _Deepest = _Deepest()
    limit: ByteSize = Field(ByteSize(1024**2), description="bytes")


class _FakeSettings(BaseSettings):
    """Fake settings: what a regrouping of the real ones could look like."""

    model_config = SettingsConfigDict(env_prefix="X_", env_nested_delimiter="__")

    home: Path = Field(
        Path("/srv"), validation_alias=AliasChoices("home", "X_HOME_DIR"), description="home"
    )
    serve: _Group = _Group()
    words: list[str] = Field(default_factory=list, description="words")


def test_groups_are_walked_however_deep_they_are_nested():
    groups = setting_groups(_FakeSettings)
    assert [(g.name, g.about) for g in groups] == [
        ("", "Fake settings: what a regrouping of the real ones could look like."),
        ("serve", "A group of its own."),
        ("serve.inner", "The innermost group."),
    ]
    rows = [(s.name, s.default, s.env, s.knob) for g in groups for s in g.settings]
    assert rows == [
        ("home", '"/srv"', "X_HOME_DIR", False),
        ("words", "[]", "X_WORDS", False),
        ("serve.token", "null", "X_SERVE__TOKEN", False),
        ("serve.limit", "1.0MiB", "X_SERVE__LIMIT", False),
        ("serve.inner.depth", "3", "X_SERVE__INNER__DEPTH", True),
    ]


def test_the_tuned_thresholds_are_knobs_and_the_plumbing_is_not():
    knobs = {s.name for s in SETTINGS if s.knob}
    assert {"turn.patience_secs", "turn.smart_turn_lean", "asr.short_turn_secs"} <= knobs
    assert not knobs & {"llm.engine", "asr.model", "sample_rate", "tts.voice"}


def test_explain_fits_a_100_column_terminal_and_names_every_setting():
    done = CliRunner().invoke(app, ["config", "--explain"])
    assert done.exit_code == 0, done.output
    lines = done.output.splitlines()
    assert max(len(line) for line in lines) <= 100
    for s in SETTINGS:
        assert s.name in done.output and s.env in done.output, s.name
    knob_lines = [line for line in lines if re.match(r"│ knob\s+│", line)]
    assert len(knob_lines) == sum(s.knob for s in SETTINGS)


def test_docs_settings_md_is_generated_from_the_settings():
    assert DOCS.read_text() == markdown(), f"docs/settings.md is stale: run `{MARKDOWN_COMMAND}`"
    for s in SETTINGS:
        assert f"`{s.name}`" in DOCS.read_text()
