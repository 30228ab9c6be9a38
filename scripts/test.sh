#!/usr/bin/env bash
# The tests: every runtime with NumPy 2 in .venv, then the tflite-runtime lane (NumPy < 2) in tox.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
.venv/bin/pytest -n 2 tests examples "$@"
.venv/bin/tox -e tflite-runtime
