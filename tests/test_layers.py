"""Imports inside ``agent`` only point down the layers that docs/design.md lists, so a module
can be read (and replaced) knowing only what sits below it."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "agent"

# Highest first, as in docs/design.md. A layer holds components (name -> module prefixes); a
# module belongs to the component with its longest matching prefix. It may import its own
# component and any lower layer, never a higher layer or another component of its own layer.
LAYERS: tuple[dict[str, tuple[str, ...]], ...] = (
    {"cli": ("agent.cli",)},
    {"live": ("agent.live",), "evaluation": ("agent.evaluation",)},
    {"replay": ("agent.replay",)},
    {"pipeline": ("agent.pipeline",)},
    {"turns": ("agent.turns",)},
    {"transports": ("agent.transports",), "recognition": ("agent.recognition",),
     "llm": ("agent.llm",), "synthesis": ("agent.synthesis",), "reports": ("agent.reports",)},
    {"tools": ("agent.tools",)},
    {"settings": ("agent.settings",)},
    {"timing": ("agent.timing",)},
    {"base": ("agent", "agent.audio", "agent.clock", "agent.csp", "agent.errors",
              "agent.frames", "agent.model_store", "agent.net", "agent.private_files",
              "agent.redact", "agent.sentences", "agent.yaml_file")},
)  # fmt: skip


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path) -> set[str]:
    """Every ``agent`` module a file imports, at the top or inside a function."""
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            # ``from agent import model_store`` imports the module, not the package.
            found.update(f"{base}.{alias.name}" for alias in node.names)
            found.add(base)
    return {name for name in found if name == "agent" or name.startswith("agent.")}


def place(module: str) -> tuple[int, str] | None:
    """(layer index, component) of a module, or None when no layer claims it."""
    best: tuple[int, int, str] | None = None
    for index, layer in enumerate(LAYERS):
        for component, prefixes in layer.items():
            for prefix in prefixes:
                if module == prefix or (prefix != "agent" and module.startswith(prefix + ".")):
                    if best is None or len(prefix) > best[0]:
                        best = (len(prefix), index, component)
    return None if best is None else (best[1], best[2])


def violations(modules: dict[str, set[str]]) -> list[str]:
    """One line per import that points up or sideways, or module no layer claims."""
    problems: list[str] = []
    for module, targets in sorted(modules.items()):
        here = place(module)
        if here is None:
            problems.append(f"{module} is in no layer: add it to LAYERS and docs/design.md")
            continue
        for target in sorted(targets):
            there = place(target)
            if target not in modules or there is None or there[1] == here[1]:
                continue  # a name inside a module, or the module's own component
            if there[0] < here[0]:
                problems.append(f"{module} imports {target}, a higher layer ({there[1]})")
            elif there[0] == here[0]:
                problems.append(f"{module} imports {target}, a sibling component ({there[1]})")
    return problems


@functools.cache
def _parsed() -> tuple[tuple[str, frozenset[str]], ...]:
    return tuple(
        (module_name(path), frozenset(imported(path))) for path in sorted(PACKAGE.rglob("*.py"))
    )


def agent_modules() -> dict[str, set[str]]:
    """Every module of ``agent`` and what it imports (parsed once a session; a fresh dict)."""
    return {module: set(targets) for module, targets in _parsed()}


def test_imports_only_point_down() -> None:
    assert violations(agent_modules()) == []


@pytest.mark.parametrize(
    ("module", "target", "problem"),
    [
        ("agent.transports.phone", "agent.live.server", "a higher layer (live)"),
        ("agent.recognition.streaming_stt", "agent.pipeline", "a higher layer (pipeline)"),
        ("agent.transports.browser", "agent.llm.prompt", "a sibling component (llm)"),
        ("agent.settings", "agent.llm.engines.chat", "a higher layer (llm)"),
    ],
)  # fmt: skip
def test_a_wrong_import_is_caught(module: str, target: str, problem: str) -> None:
    modules = agent_modules()
    modules[module] = modules[module] | {target}
    assert violations(modules) == [f"{module} imports {target}, {problem}"]


def test_every_module_has_a_layer() -> None:
    assert [m for m in agent_modules() if place(m) is None] == []
    assert violations({"agent.newpackage.thing": set()}) == [
        "agent.newpackage.thing is in no layer: add it to LAYERS and docs/design.md"
    ]
