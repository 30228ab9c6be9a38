#!/usr/bin/env bash
# The demo: pytest-edge on the shipped example models, printing the conformance table.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
exec .venv/bin/pytest examples -p no:cacheprovider --edge-measure --edge-report=.edge/demo-report.json -q "$@"
