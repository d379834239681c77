#!/usr/bin/env bash
# One command: set up, then replay the sample turns through one call and print the table.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/voice-agent replay \
  agent/samples/new_home_in_the_stars.wav agent/samples/jfk_part1.wav \
  agent/samples/jfk_part2.wav agent/samples/ldc93s1.wav \
  --out runs/demo "$@"
