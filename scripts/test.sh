#!/usr/bin/env bash
# The tests: every runtime with NumPy 2 in .venv, the demo, then the tflite-runtime lane (NumPy < 2) in tox.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
# Bytecode is written (Python's default; a machine may set PYTHONDONTWRITEBYTECODE=1): without it every
# pytest process, and each in-process pytester run, compiled the package's modules again from
# source (tests/test_golden_sets.py: 26.4 CPU-s without bytecode, 19.3 with).
unset PYTHONDONTWRITEBYTECODE
# The SSH device test starts Debian's openssh-server on loopback; install it where we can (root,
# apt). Where it cannot be had, that test is skipped with the reason.
if [[ $(id -u) == 0 && ! -x /usr/sbin/sshd ]] && command -v apt-get >/dev/null; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-server openssh-client \
    >/dev/null 2>&1) || echo "openssh-server could not be installed: the SSH device test will be skipped"
fi
# The HTML report's browser test renders the page in Debian's headless chromium; install it where we
# can (root, apt). Where it cannot be had, that test is skipped with the reason.
if [[ $(id -u) == 0 ]] && ! command -v chromium >/dev/null && command -v apt-get >/dev/null; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium \
    >/dev/null 2>&1) || echo "chromium could not be installed: the HTML report's browser test will be skipped"
fi
# The emulated aarch64 device (qemu:aarch64) is provisioned with mmdebstrap, which unpacks Debian's
# qemu-user-static and arm64 Python; install it where we can (root, apt). Where it cannot be had, the
# device's tests are skipped with the reason. The device is cached in ~/.cache/pytest-edge/devices.
if [[ $(id -u) == 0 ]] && ! command -v mmdebstrap >/dev/null && command -v apt-get >/dev/null; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mmdebstrap \
    >/dev/null 2>&1) || echo "mmdebstrap could not be installed: the qemu:aarch64 device tests will be skipped"
fi
# Counted mode (--edge-count=instructions) runs measuring workers under Valgrind's callgrind; install
# it where we can (root, apt). Where it cannot be had, the counted tests are skipped with the reason.
if [[ $(id -u) == 0 ]] && ! command -v valgrind >/dev/null && command -v apt-get >/dev/null; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind \
    >/dev/null 2>&1) || echo "valgrind could not be installed: the counted-mode tests will be skipped"
fi
# The OpenMetrics tests check the file with Debian's prometheus (promtool, a real Prometheus on loopback
# and node_exporter's textfile collector); install it where we can (root, apt). Where it cannot be had,
# those tests are skipped with the reason.
if [[ $(id -u) == 0 ]] && ! command -v promtool >/dev/null && command -v apt-get >/dev/null; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus \
    >/dev/null 2>&1) || echo "prometheus could not be installed: the OpenMetrics tests against Prometheus will be skipped"
fi
# One xdist worker per core this job may run on (its CPU affinity: taskset), at most 2: measured
# tests take a machine-wide lock, so more workers mostly wait. On one core a second worker only
# shares it, its start (the runtimes' imports) and its caches with the first.
EDGE_XDIST_WORKERS=$(.venv/bin/python -c 'import os; print(len(os.sched_getaffinity(0)))')
if (( EDGE_XDIST_WORKERS > 2 )); then EDGE_XDIST_WORKERS=2; fi
export EDGE_XDIST_WORKERS  # tox.ini's lanes read it too
# The tflite-runtime lane (NumPy < 2) first: its environment is also the "device" of another NumPy
# major version that tests/test_devices.py reaches over SSH.
.venv/bin/tox -e tflite-runtime
# The slowest tests are listed at the end, so that CI minutes can be read off any run's log.
.venv/bin/pytest -n "$EDGE_XDIST_WORKERS" --durations=30 tests "$@"
# The demo runs the examples with measurement on: the README's first command, kept working.
bash scripts/demo.sh
