"""``voice-agent config``: the effective settings, and the reference of every setting
(``--explain`` for a terminal, ``--markdown`` for docs/settings.md), read off the typed
settings themselves so that the reference cannot drift from the code."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import Annotated

import typer
import yaml
from pydantic import AliasChoices, BaseModel, ByteSize, TypeAdapter
from pydantic.fields import FieldInfo
from rich.console import Console
from rich.table import Table
from rich.text import Text

from agent.cli.support import ConfigOpt, settings_from_flags, user_errors
from agent.redact import redact_values
from agent.settings import PROJECT_ROOT, Settings

# The command that writes docs/settings.md, named wherever the file is found stale.
MARKDOWN_COMMAND = "voice-agent config --markdown > docs/settings.md"
# A longer default (a persona text) is cut here: the reference says what a setting is for,
# `voice-agent config` prints the whole value.
DEFAULT_CHARS = 48


@dataclass(frozen=True)
class SettingInfo:
    """One setting as a reader looks it up."""

    name: str  # dotted, as in a config file: turn.patience_secs
    description: str
    default: str  # as written in a config file (JSON, which YAML reads too)
    env: str  # the environment variable that sets it
    knob: bool  # a threshold tuned on the corpus (settings.KNOB)


@dataclass(frozen=True)
class SettingGroup:
    """The settings of one section of the config file ("" for the top level)."""

    name: str
    about: str
    settings: tuple[SettingInfo, ...]


def setting_groups(model: type[BaseModel] = Settings) -> list[SettingGroup]:
    """Every setting of ``model``, group by group in declaration order; any field whose type
    is a model is a group of its own, however deep."""
    config = getattr(model, "model_config", {})
    prefix = str(config.get("env_prefix", "")).upper()
    delimiter = str(config.get("env_nested_delimiter") or "__")
    groups: list[SettingGroup] = []

    def walk(group: type[BaseModel], path: tuple[str, ...]) -> None:
        own: list[SettingInfo] = []
        nested: list[tuple[type[BaseModel], tuple[str, ...]]] = []
        for name, field in group.model_fields.items():
            kind = field.annotation
            if isinstance(kind, type) and issubclass(kind, BaseModel):
                nested.append((kind, (*path, name)))
                continue
            env = prefix + delimiter.join((*path, name)).upper()
            if not path:
                env = _aliased_env(field, prefix) or env
            own.append(
                SettingInfo(
                    name=".".join((*path, name)),
                    description=" ".join((field.description or "").split()),
                    default=_shown_default(field),
                    env=env,
                    knob=_is_knob(field),
                )
            )
        if own:
            groups.append(SettingGroup(".".join(path), _about(group), tuple(own)))
        for kind, where in nested:
            walk(kind, where)

    walk(model, ())
    return groups


def _is_knob(field: FieldInfo) -> bool:
    extra = field.json_schema_extra
    return isinstance(extra, dict) and bool(extra.get("knob"))


def _about(model: type[BaseModel]) -> str:
    """The first paragraph of a group's docstring, on one line."""
    return " ".join((model.__doc__ or "").strip().split("\n\n")[0].split())


def _aliased_env(field: FieldInfo, prefix: str) -> str | None:
    """A top-level field's own environment name (``VOICE_AGENT_MODELS``), where an alias
    gives it one."""
    alias = field.validation_alias
    choices = alias.choices if isinstance(alias, AliasChoices) else [alias]
    names = [c for c in choices if isinstance(c, str) and c.upper().startswith(prefix)]
    return names[0].upper() if names else None


def _shown_default(field: FieldInfo) -> str:
    """The default as a config file would spell it; paths inside the checkout start with
    ``<checkout>``, so the reference reads the same from any clone."""
    value = field.get_default(call_default_factory=True, validated_data={})
    if isinstance(value, ByteSize):
        return value.human_readable()
    shown = json.dumps(
        TypeAdapter(field.annotation).dump_python(value, mode="json"), ensure_ascii=False
    )
    shown = shown.replace(str(PROJECT_ROOT), "<checkout>")
    return shown if len(shown) <= DEFAULT_CHARS else shown[: DEFAULT_CHARS - 1] + "…"


def explain(console: Console) -> None:
    """Every setting with what it is for, its default, its environment variable and whether
    it is a tuning knob, as one table a group, readable at 100 columns."""
    console.print(
        "Precedence: flags > environment > config file (--config) > defaults. "
        "[yellow]knob[/yellow]: a threshold tuned on the corpus; "
        "a change trades one kind of error for another (docs/eval.md).",
        highlight=False,
    )
    for group in setting_groups():
        title = f"{group.name or 'top level'}: {group.about}"
        table = Table(
            title=title, title_justify="left", show_header=False, show_lines=True, expand=True
        )
        table.add_column("setting", no_wrap=True, style="bold")
        table.add_column("description", ratio=1)
        for s in group.settings:
            name = Text(s.name, style="bold")
            if s.knob:
                name.append("\nknob", style="yellow")
            about = Text(s.description)
            about.append(f"\ndefault {s.default}\n{s.env}", style="dim")
            table.add_row(name, about)
        console.print(table)


def markdown() -> str:
    """docs/settings.md: the same reference as ``--explain``, as Markdown tables."""
    lines = [
        "# Settings",
        "",
        f"Generated by `{MARKDOWN_COMMAND}` from the descriptions in",
        "`agent/settings.py`: edit those, then run it again (a test fails while this file is",
        "stale). `voice-agent config --explain` prints the same in a terminal, and",
        "`voice-agent config` the values in effect.",
        "",
        "Precedence, highest first: command-line flags, environment variables, a YAML file",
        "(`--config FILE` or `VOICE_AGENT_CONFIG`), the defaults. In the environment, `null`",
        "turns an option off and a list is written as JSON. A default under `<checkout>` is",
        "inside the clone (an installed package has its own copy). A **knob** is a threshold",
        "tuned on the corpus: a change trades one kind of error for another, so measure it",
        "(docs/eval.md).",
    ]
    for group in setting_groups():
        lines += ["", f"## {group.name or 'Top level'}", "", group.about, ""]
        lines += ["| setting | default | environment variable | what it is for |"]
        lines += ["| --- | --- | --- | --- |"]
        for s in group.settings:
            knob = " **knob**" if s.knob else ""
            cells = (f"`{s.name}`{knob}", f"`{s.default}`", f"`{s.env}`", s.description)
            lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"


def register(app: typer.Typer) -> None:
    @app.command("config")
    @user_errors
    def show_config(
        config: ConfigOpt = None,
        explain_: Annotated[
            bool,
            typer.Option(
                "--explain",
                help="What each setting is for: description, default, environment "
                "variable, tuning knob.",
            ),
        ] = False,
        markdown_: Annotated[
            bool, typer.Option("--markdown", help=f"The same as Markdown ({MARKDOWN_COMMAND}).")
        ] = False,
    ) -> None:
        """Print the effective settings (defaults < config file < environment < flags)."""
        if markdown_:
            typer.echo(markdown(), nl=False)
            return
        if explain_:
            explain(Console(width=None if sys.stdout.isatty() else 100))
            return
        settings = settings_from_flags(config)
        data = redact_values(json.loads(settings.model_dump_json()))  # secrets already masked
        console = Console(width=None if sys.stdout.isatty() else 160)
        console.print(yaml.safe_dump(data, sort_keys=False), end="", highlight=False)
