#!/usr/bin/env bash
# One command: set up, then run the test suite with the real models.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --pool  # HAProxy too, for the worker pool's tests
# The real-vLLM tests (marker `vllm`) are skipped unless asked for: vLLM's CPU build is 3.5 GB.
if [ "${VOICE_AGENT_TEST_VLLM:-}" = 1 ]; then
  bash scripts/setup_vllm.sh
fi
.venv/bin/ruff check agent benchmarks tests scripts conftest.py
set +e
.venv/bin/python -m pytest "$@"
status=$?
set -e
if [ "$status" -eq 5 ]; then
  echo "error: pytest collected no tests" >&2
  exit 1
fi
exit "$status"
