"""Print the folder that holds this machine's llama-cpp-python wheel, building it first when no
set-up on this machine has.

Why: llama-cpp-python has no binary wheel on the package index, so an install builds it from
source (about 9.5 minutes on 2 cores), and uv's cache did not spare a second checkout that
build: uv keys a built wheel by the download of its source archive, and each new install
downloaded it again as a new revision. So the wheel is kept machine-wide in
``~/.cache/voice-agent/wheels/llama-cpp-python-<version>-<key>`` (``VOICE_AGENT_WHEELS``
moves the parent folder), keyed by what the build depends on: the version pinned in
pyproject.toml, this Python, the machine and ``CMAKE_ARGS``. ``scripts/setup.sh`` installs
from that folder with ``--find-links``.

The build targets any x86-64 with AVX2 rather than this exact CPU (``DEFAULT_CMAKE_ARGS``): a
CPU that advertises AMX inside a VM that does not enable it crashes a native build with
"Illegal instruction". Set ``CMAKE_ARGS`` to build otherwise; that builds and keeps a wheel
of its own. Standard library only: this runs before anything else is installed.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "llama-cpp-python"
DEFAULT_CMAKE_ARGS = (
    "-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON "
    "-DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
)


def pinned_version() -> str:
    """The llama-cpp-python version pyproject.toml pins (``==``)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    for requirement in project["dependencies"]:
        name, sep, version = requirement.partition("==")
        if sep and name.split("[")[0].strip() == PACKAGE:
            return version.strip()
    raise SystemExit(f"error: pyproject.toml pins no {PACKAGE}==VERSION")


def cmake_args() -> str:
    return os.environ.get("CMAKE_ARGS") or DEFAULT_CMAKE_ARGS


def cache_home() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")


def wheel_dir(version: str) -> Path:
    """This machine's folder for the wheel built with the current CMAKE_ARGS."""
    parts = (version, sys.implementation.cache_tag, platform.machine(), cmake_args())
    key = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]
    parent = os.environ.get("VOICE_AGENT_WHEELS") or cache_home() / "voice-agent" / "wheels"
    return Path(parent) / f"{PACKAGE}-{version}-{key}"


def wheels_in(folder: Path, version: str) -> list[Path]:
    """Whole llama-cpp-python wheels of ``version`` in ``folder``, newest first."""
    found = [p for p in folder.glob(f"llama_cpp_python-{version}-*.whl") if zipfile.is_zipfile(p)]
    return sorted(found, key=lambda p: p.stat().st_mtime, reverse=True)


def uv_built_wheel(version: str) -> Path | None:
    """A wheel that uv built on this machine, as the earlier set-up script did (always with
    DEFAULT_CMAKE_ARGS); None when there is none or uv keeps its cache another way."""
    uv_cache = Path(os.environ.get("UV_CACHE_DIR") or cache_home() / "uv")
    for sdists in sorted(uv_cache.glob("sdists-v*"), reverse=True):
        for revision in (sdists / "pypi" / PACKAGE / version).glob("*"):
            found = wheels_in(revision, version)
            if found:
                return found[0]
    return None


def build(version: str, scratch: Path) -> Path:
    """Build the wheel with pip (CMAKE_ARGS from cmake_args()) into ``scratch``."""
    print(
        f"building {PACKAGE} {version} once for this machine (about 10 minutes on 2 cores)",
        file=sys.stderr,
    )
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check",
         "--no-deps", "--no-binary", PACKAGE, "-w", str(scratch), f"{PACKAGE}=={version}"],
        check=True, env={**os.environ, "CMAKE_ARGS": cmake_args()},
    )  # fmt: skip
    found = wheels_in(scratch, version)
    if not found:
        raise SystemExit(f"error: pip built no {PACKAGE} {version} wheel")
    return found[0]


def ensure_wheel() -> Path:
    """The folder with this machine's wheel: kept, adopted from uv's cache, or built now. A
    wheel is moved in whole, so an interrupted build leaves nothing to be taken for one."""
    version = pinned_version()
    folder = wheel_dir(version)
    if wheels_in(folder, version):
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    adopted = uv_built_wheel(version) if cmake_args() == DEFAULT_CMAKE_ARGS else None
    with tempfile.TemporaryDirectory(dir=folder.parent) as scratch:
        if adopted is not None:
            wheel = Path(scratch) / adopted.name
            shutil.copyfile(adopted, wheel)
            print(
                f"{PACKAGE}: the wheel uv built earlier on this machine, {adopted}", file=sys.stderr
            )
        else:
            wheel = build(version, Path(scratch))
        wheel.replace(folder / wheel.name)
    return folder


if __name__ == "__main__":
    if len(sys.argv) > 1:
        raise SystemExit(f"usage: {sys.argv[0]}  (no arguments; see its docstring)")
    print(ensure_wheel())
