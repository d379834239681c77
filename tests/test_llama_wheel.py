"""scripts/llama_wheel.py: one llama-cpp-python build per machine and CMAKE_ARGS.

No build runs here: the wheels are empty zip files with the right names.
"""

from __future__ import annotations

import importlib.util
import zipfile
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "llama_wheel.py"


@pytest.fixture
def llama_wheel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    spec = importlib.util.spec_from_file_location("llama_wheel", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("VOICE_AGENT_WHEELS", raising=False)
    monkeypatch.delenv("UV_CACHE_DIR", raising=False)
    monkeypatch.delenv("CMAKE_ARGS", raising=False)
    monkeypatch.setattr(module, "build", _no_build)
    return module


def _no_build(version: str, scratch: Path) -> Path:
    raise AssertionError("no build expected")


def fake_wheel(folder: Path, version: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"llama_cpp_python-{version}-py3-none-linux_x86_64.whl"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("llama_cpp/__init__.py", "")
    return path


def test_the_key_follows_cmake_args(llama_wheel, monkeypatch):
    version = llama_wheel.pinned_version()
    default = llama_wheel.wheel_dir(version)
    assert default.parent == llama_wheel.cache_home() / "voice-agent" / "wheels"
    monkeypatch.setenv("CMAKE_ARGS", "-DGGML_NATIVE=ON")
    assert llama_wheel.wheel_dir(version) != default
    monkeypatch.setenv("CMAKE_ARGS", llama_wheel.DEFAULT_CMAKE_ARGS)
    assert llama_wheel.wheel_dir(version) == default


def test_a_kept_wheel_is_used_and_nothing_is_built(llama_wheel):
    version = llama_wheel.pinned_version()
    fake_wheel(llama_wheel.wheel_dir(version), version)
    assert llama_wheel.ensure_wheel() == llama_wheel.wheel_dir(version)


def test_uvs_wheel_is_adopted_with_the_default_flags_only(llama_wheel, monkeypatch, tmp_path):
    version = llama_wheel.pinned_version()
    revision = tmp_path / "cache" / "uv" / "sdists-v11" / "pypi" / "llama-cpp-python" / version
    built = fake_wheel(revision / "someRevision", version)
    folder = llama_wheel.ensure_wheel()
    assert [p.name for p in folder.iterdir()] == [built.name]

    monkeypatch.setenv("CMAKE_ARGS", "-DGGML_NATIVE=ON")  # uv's wheel may have other flags
    with pytest.raises(AssertionError, match="no build expected"):
        llama_wheel.ensure_wheel()


def test_a_half_written_wheel_does_not_count(llama_wheel):
    version = llama_wheel.pinned_version()
    folder = llama_wheel.wheel_dir(version)
    folder.mkdir(parents=True)
    (folder / f"llama_cpp_python-{version}-py3-none-linux_x86_64.whl").write_bytes(b"PK\x03")
    assert llama_wheel.wheels_in(folder, version) == []


def test_a_kept_server_is_used_and_nothing_is_built(llama_wheel, monkeypatch):
    def no_build(version: str, scratch: Path) -> Path:
        raise AssertionError("no build expected")

    monkeypatch.setattr(llama_wheel, "build_server", no_build)
    version = llama_wheel.pinned_version()
    folder = llama_wheel.wheel_dir(version, llama_wheel.SERVER)
    assert folder != llama_wheel.wheel_dir(version)  # beside the wheel, not in its folder
    folder.mkdir(parents=True)
    (folder / "llama-server").write_bytes(b"#!/bin/sh\n")
    assert llama_wheel.ensure_server() == folder / "llama-server"
