"""The tiers of tests/ and benchmarks/tests/, and their shared fixtures (the sample speech's
manifest, the default settings). Shared helpers that tests import are in tests/support/.

Tests that load a real model (or run a command or server that does), start a browser or
import the whole agent in child processes are ``slow``: by module (``pytestmark``), by using
one of ``SLOW_FIXTURES``, or one by one. The fast tier (``pytest -m "not slow"``) runs
without any model: there a test that reaches for one fails at once, saying to mark it slow.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from agent import model_store
from agent.settings import Settings
from agent.turns.vad import TurnModels
from tests.support import clips

# Fixtures that hold a real model, or a run or server made with them.
SLOW_FIXTURES = frozenset({"decoder", "eval_run", "inprocess", "models", "piper", "pool",
                           "replayed", "server"})  # fmt: skip
REAL_MODELS = Settings().models_dir.resolve()
FAST_TIER_PATCH = pytest.StashKey[pytest.MonkeyPatch]()


class NeedsRealModel(AssertionError):
    """A fast-tier test reached for a real model."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Keeps the fast tier fast and model-free: outside ``slow`` tests, from before their
    fixtures are made, the models folder is an empty one (for child processes too) and the
    real one cannot be resolved, so a test that needs a model fails, saying to mark it."""
    if item.get_closest_marker("slow"):
        return
    patch = item.stash[FAST_TIER_PATCH] = pytest.MonkeyPatch()
    empty = Path(tempfile.gettempdir()) / "voice-agent-fast-tier-has-no-models-mark-the-test-slow"
    empty.mkdir(exist_ok=True)
    patch.setenv("VOICE_AGENT_MODELS", str(empty))
    resolve = model_store.resolve

    def refuse_real(key_or_path: str, role: str, models_dir: Path) -> Path:
        if Path(models_dir).resolve() == REAL_MODELS:
            raise NeedsRealModel(f"this test loads the real {role} model: mark it slow")
        return resolve(key_or_path, role, models_dir)

    def refuse_turn_models() -> TurnModels:
        raise NeedsRealModel("this test loads the VAD and Smart Turn models: mark it slow")

    patch.setattr(model_store, "resolve", refuse_real)
    patch.setattr(TurnModels, "load", refuse_turn_models)


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    patch = item.stash.get(FAST_TIER_PATCH, None)
    if patch is not None:
        patch.undo()


@pytest.fixture(scope="session")
def manifest() -> dict[str, dict]:
    return clips.manifest()


@pytest.fixture(scope="session")
def settings() -> Settings:
    return Settings()
