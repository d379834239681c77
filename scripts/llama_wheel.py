"""Print the folder that holds this machine's llama-cpp-python wheel, building it first when no
set-up on this machine has; with ``--server``, the path of llama.cpp's own ``llama-server``
built from the same pinned release.

Why: llama-cpp-python has no binary wheel on the package index, so an install builds it from
source (about 9.5 minutes on 2 cores), and uv's cache did not spare a second checkout that
build: uv keys a built wheel by the download of its source archive, and each new install
downloaded it again as a new revision. So the wheel is kept machine-wide in
``~/.cache/voice-agent/wheels/llama-cpp-python-<version>-<key>`` (``VOICE_AGENT_WHEELS``
moves the parent folder), keyed by what the build depends on: the version pinned in
pyproject.toml, this Python, the machine and ``CMAKE_ARGS``. ``scripts/setup.sh`` installs
from that folder with ``--find-links``.

The build targets AVX2, and AVX-512 (with its VNNI, VBMI and BF16 parts) where the kernel
reports this CPU runs it (``default_cmake_args``): on two AVX-512 cores llama.cpp prefills
a third faster and decodes a seventh faster than its AVX2 build. It is never a native build
and never uses AMX: a CPU that advertises AMX inside a VM that does not enable it crashes a
native build with "Illegal instruction". Set ``CMAKE_ARGS`` to build otherwise; that builds
and keeps a wheel of its own. Standard library only: this runs before anything else is
installed.

``--server``: llama-cpp-python's own server answers one request at a time, so calls that
share it queue; llama.cpp's ``llama-server`` decodes several at once (parallel slots,
continuous batching). It is built from the llama.cpp sources vendored in the same pinned
llama-cpp-python release (so both engines run the same llama.cpp), with the same flags, once
per machine (about 10 minutes on 2 cores), and kept beside the wheel.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "llama-cpp-python"
AVX2 = "-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON"
NO_AMX = "-DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
AVX2_CMAKE_ARGS = f"{AVX2} -DGGML_AVX512=OFF {NO_AMX}"  # what every earlier set-up built
# llama.cpp's AVX-512 options and the CPU flags (as /proc/cpuinfo names them) each one needs.
AVX512_OPTIONS = {
    "GGML_AVX512": {"avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw"},
    "GGML_AVX512_VBMI": {"avx512vbmi"},
    "GGML_AVX512_VNNI": {"avx512_vnni"},
    "GGML_AVX512_BF16": {"avx512_bf16"},
}


def pinned_version() -> str:
    """The llama-cpp-python version pyproject.toml pins (``==``)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    for requirement in project["dependencies"]:
        name, sep, version = requirement.partition("==")
        if sep and name.split("[")[0].strip() == PACKAGE:
            return version.strip()
    raise SystemExit(f"error: pyproject.toml pins no {PACKAGE}==VERSION")


def cpu_flags() -> set[str]:
    """The CPU features the kernel reports it runs (none known off Linux)."""
    try:
        lines = Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines()
    except OSError:
        return set()
    return next(
        (set(ln.partition(":")[2].split()) for ln in lines if ln.startswith("flags")), set()
    )


def default_cmake_args(flags: set[str]) -> str:
    """AVX2, with each AVX-512 part ``flags`` has when it has AVX-512 at all; never AMX."""
    if not AVX512_OPTIONS["GGML_AVX512"] <= flags:
        return AVX2_CMAKE_ARGS
    parts = [
        f"-D{name}={'ON' if need <= flags else 'OFF'}" for name, need in AVX512_OPTIONS.items()
    ]
    return " ".join([AVX2, *parts, NO_AMX])


def cmake_args() -> str:
    return os.environ.get("CMAKE_ARGS") or default_cmake_args(cpu_flags())


def cache_home() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")


def wheel_dir(version: str, kind: str = PACKAGE) -> Path:
    """This machine's folder for the wheel (or, ``kind="llama-server"``, the server) built
    with the current CMAKE_ARGS."""
    parts = (version, sys.implementation.cache_tag, platform.machine(), cmake_args())
    key = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]
    parent = os.environ.get("VOICE_AGENT_WHEELS") or cache_home() / "voice-agent" / "wheels"
    return Path(parent) / f"{kind}-{version}-{key}"


def wheels_in(folder: Path, version: str) -> list[Path]:
    """Whole llama-cpp-python wheels of ``version`` in ``folder``, newest first."""
    found = [p for p in folder.glob(f"llama_cpp_python-{version}-*.whl") if zipfile.is_zipfile(p)]
    return sorted(found, key=lambda p: p.stat().st_mtime, reverse=True)


def uv_built_wheel(version: str) -> Path | None:
    """A wheel that uv built on this machine, as the earlier set-up script did (always with
    AVX2_CMAKE_ARGS); None when there is none or uv keeps its cache another way."""
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
         "--no-cache-dir",  # pip's cache keys a built wheel by its source, not CMAKE_ARGS
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
    adopted = uv_built_wheel(version) if cmake_args() == AVX2_CMAKE_ARGS else None
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


SERVER = "llama-server"
SERVER_CMAKE_ARGS = (  # the server alone: no tests, no examples, no web page, no TLS
    "-DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF "
    "-DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON "
    "-DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF"
)


def build_server(version: str, scratch: Path) -> Path:
    """Build ``llama-server`` from the pinned release's vendored llama.cpp into ``scratch``."""
    print(
        f"building {SERVER} from {PACKAGE} {version} once for this machine "
        "(about 10 minutes on 2 cores)",
        file=sys.stderr,
    )
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
         "--no-deps", "--no-binary", ":all:", "-d", str(scratch), f"{PACKAGE}=={version}"],
        check=True,
    )  # fmt: skip
    archives = list(scratch.glob("*.tar.gz"))
    if not archives:
        raise SystemExit(f"error: pip downloaded no {PACKAGE} {version} source archive")
    with tarfile.open(archives[0]) as tar:
        tar.extractall(scratch, filter="data")
    source = next(scratch.glob("*/vendor/llama.cpp"))
    cmake = shutil.which("cmake")
    if cmake is None:  # as pip's build of the wheel does: CMake from the package index
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "cmake"], check=True)
        cmake = str(Path(sys.executable).parent / "cmake")
    out = scratch / "build"
    flags = [*cmake_args().split(), *SERVER_CMAKE_ARGS.split()]
    subprocess.run([cmake, "-S", str(source), "-B", str(out), *flags], check=True,
                   stdout=subprocess.DEVNULL)  # fmt: skip
    jobs = str(os.cpu_count() or 2)
    subprocess.run([cmake, "--build", str(out), "--target", SERVER, "-j", jobs], check=True,
                   stdout=subprocess.DEVNULL)  # fmt: skip
    return out / "bin" / SERVER


def ensure_server() -> Path:
    """This machine's ``llama-server``: kept, or built now (moved in whole when done)."""
    version = pinned_version()
    folder = wheel_dir(version, SERVER)
    binary = folder / SERVER
    if binary.is_file():
        return binary
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder.parent) as scratch:
        built = build_server(version, Path(scratch))
        built.replace(binary)
    return binary


if __name__ == "__main__":
    if sys.argv[1:] == ["--server"]:
        print(ensure_server())
    elif len(sys.argv) > 1:
        raise SystemExit(f"usage: {sys.argv[0]} [--server]  (see its docstring)")
    else:
        print(ensure_wheel())
