#!/usr/bin/env bash
# The tests: every runtime with NumPy 2 in .venv, the demo, then the tflite-runtime lane (NumPy < 2) in tox.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
.venv/bin/pytest -n 2 tests "$@"
# The demo runs the examples with measurement on: the README's first command, kept working.
bash scripts/demo.sh
.venv/bin/tox -e tflite-runtime
