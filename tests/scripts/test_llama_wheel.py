"""scripts/llama_wheel.py: one llama-cpp-python build per machine and CMAKE_ARGS.

No build runs here: the wheels are empty zip files with the right names.
"""

from __future__ import annotations

import importlib.util
import zipfile
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "llama_wheel.py"


@pytest.fixture
def script() -> ModuleType:
    """The script as it is (its own copy per test: the tests patch it)."""
    spec = importlib.util.spec_from_file_location("llama_wheel", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def llama_wheel(script: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The script with no build and no environment of this machine's."""
    module = script
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("VOICE_AGENT_WHEELS", raising=False)
    monkeypatch.delenv("UV_CACHE_DIR", raising=False)
    monkeypatch.delenv("CMAKE_ARGS", raising=False)
    monkeypatch.setattr(module, "build", _no_build)
    monkeypatch.setattr(module, "cpu_flags", lambda: ZEN3)  # the same key on any test machine
    return module


# /proc/cpuinfo flags (abridged) of an AMD Zen 3 (AVX2 only) and of a Sapphire Rapids VM
# (AVX-512 with VNNI, VBMI and BF16; AMX advertised, which such a VM may not enable).
ZEN3 = {"sse4_2", "avx", "avx2", "fma", "f16c", "bmi2", "vaes", "vpclmulqdq"}
SAPPHIRE_RAPIDS = ZEN3 | {
    "avx512f", "avx512dq", "avx512cd", "avx512bw", "avx512vl", "avx512vbmi", "avx512_vnni",
    "avx512_bf16", "avx512_fp16", "avx_vnni", "amx_tile", "amx_int8", "amx_bf16",
}  # fmt: skip


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
    monkeypatch.setenv("CMAKE_ARGS", llama_wheel.AVX2_CMAKE_ARGS)
    assert llama_wheel.wheel_dir(version) == default


def test_the_build_uses_avx512_where_the_cpu_runs_it_and_never_amx(llama_wheel):
    # An AVX2 machine keeps the flags (and so the kept wheel) of every earlier set-up.
    assert llama_wheel.default_cmake_args(ZEN3) == llama_wheel.AVX2_CMAKE_ARGS
    args = llama_wheel.default_cmake_args(SAPPHIRE_RAPIDS).split()
    for name in ("AVX2", "AVX512", "AVX512_VNNI", "AVX512_VBMI", "AVX512_BF16"):
        assert f"-DGGML_{name}=ON" in args
    assert all(f"-DGGML_AMX_{part}=OFF" in args for part in ("TILE", "INT8", "BF16"))
    assert "-DGGML_NATIVE=OFF" in args
    # AVX-512 without VNNI (Skylake-SP): the base set only.
    skylake = ZEN3 | {"avx512f", "avx512dq", "avx512cd", "avx512bw", "avx512vl"}
    args = llama_wheel.default_cmake_args(skylake).split()
    assert "-DGGML_AVX512=ON" in args and "-DGGML_AVX512_VNNI=OFF" in args
    # Part of the base set missing: no AVX-512 at all.
    assert llama_wheel.default_cmake_args(skylake - {"avx512bw"}) == llama_wheel.AVX2_CMAKE_ARGS


def test_the_build_never_takes_a_wheel_from_pips_cache(script, monkeypatch, tmp_path):
    """pip keys a wheel it built by its source archive, so its cache would hand back a wheel
    built with other CMAKE_ARGS (an AVX2 build where AVX-512 was asked for)."""
    calls: list[list[str]] = []
    monkeypatch.setattr(script.subprocess, "run", lambda cmd, **kw: calls.append(cmd))
    with pytest.raises(SystemExit, match="built no"):
        script.build("0.3.36", tmp_path)
    (pip_wheel,) = calls
    assert pip_wheel[1:4] == ["-m", "pip", "wheel"] and "--no-cache-dir" in pip_wheel


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
