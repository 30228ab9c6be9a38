#!/usr/bin/env bash
# Make .venv with pytest-edge, every runtime and the test tools. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [[ ! -x .venv/bin/python ]]; then
  "$PYTHON" -m venv .venv
fi
stamp=.venv/.pytest-edge-installed
if [[ ! -f $stamp || pyproject.toml -nt $stamp ]]; then
  .venv/bin/python -m pip install --quiet --upgrade pip
  # torch==2.13.0 comes with the executorch extra; where PyPI would give its CUDA build, install
  # the CPU build first (docs/index.md, "Use it in your project").
  .venv/bin/python -m pip install --quiet -e '.[all,test,export,docs]' 'tox>=4'
  touch "$stamp"
fi
