#!/usr/bin/env bash
# The demo: pytest-edge on the shipped example models, printing the conformance table.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
# Every installed runtime, no list: a backend that cannot convert a borrowed artifact (OpenVINO and
# a stateful .tflite) is reported as such in the table, not failed.
.venv/bin/pytest examples -p no:cacheprovider --edge-measure --edge-report=.edge/demo-report.json \
  --edge-html=.edge/demo-report.html -q "$@"
# Then a local "device": a worker started by a command and spoken to over its stdin/stdout, as an
# ssh or adb device would be (docs/devices.md); '*@here' selects every registered runtime there.
# Outputs, coverage and budgets through the device's worker, not timed: "here" is this machine, whose
# timing the first run measured (timing it again took 52 of the run's 74 s on one core).
exec .venv/bin/pytest examples -p no:cacheprovider --edge-report=.edge/demo-device-report.json \
  --edge-device "here=$PWD/.venv/bin/python -m pytest_edge.worker --stdio" \
  '--edge-backends=*@here' -q "$@"
