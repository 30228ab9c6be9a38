#!/usr/bin/env bash
# The demo: pytest-edge on the shipped example models, printing the conformance table.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
# Besides this machine's backends, a local "device": a worker started by a command and spoken to
# over its stdin/stdout, as an ssh or adb device would be (docs/devices.md).
exec .venv/bin/pytest examples -p no:cacheprovider --edge-measure --edge-report=.edge/demo-report.json \
  --edge-html=.edge/demo-report.html \
  --edge-device "here=$PWD/.venv/bin/python -m pytest_edge.worker --stdio" \
  --edge-backends=onnxruntime-cpu,litert,litert-ref,executorch,onnxruntime-cpu@here -q "$@"
