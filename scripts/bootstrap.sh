#!/usr/bin/env bash
# Make .venv with pytest-edge, every runtime and the test tools. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [[ ! -x .venv/bin/python ]]; then
  "$PYTHON" -m venv .venv
fi
# llama-cpp-python has no wheel for this platform: it is built from its sdist once per machine, for
# x86-64-v3 (GGML_NATIVE=OFF: AVX2, FMA, F16C; no AVX-512, no AMX). -march=native would compile in
# AMX tiles, which trap (SIGILL, in ggml_backend_amx_mul_mat) on a VM that advertises AMX without
# enabling it: every Q8_0 GGUF crashed here. Kept apart from pip's cache, which keys a built
# wheel by its sdist only, not by the flags it was built with.
LLAMA_CPP=llama-cpp-python==0.3.36
wheels=${PYTEST_EDGE_WHEELS:-$HOME/.cache/pytest-edge/wheels}
if ! compgen -G "$wheels/llama_cpp_python-0.3.36-*.whl" >/dev/null; then
  echo "bootstrap: building $LLAMA_CPP from its sdist for x86-64-v3 (once per machine, ~13 CPU-minutes) ..." >&2
  CMAKE_ARGS="-DGGML_NATIVE=OFF" .venv/bin/python -m pip wheel --quiet --no-deps --no-cache-dir \
    --no-binary llama-cpp-python "$LLAMA_CPP" -w "$wheels"
fi
# pywhispercpp (whisper.cpp, docs/speech.md) has no wheel for this platform either: built from its
# sdist the same way (GGML_NATIVE=OFF, for the same reason), with its libraries found beside its
# module (an RPATH of $ORIGIN: its setup.py leaves that to cibuildwheel's repair, which a local build
# does not run). The sdist is kept too: fixtures/make_speech_runtimes.py runs whisper.cpp's own
# converter from it.
WHISPER_CPP=pywhispercpp==1.5.1
if ! compgen -G "$wheels/pywhispercpp-1.5.1-*.whl" >/dev/null; then
  echo "bootstrap: building $WHISPER_CPP from its sdist for x86-64-v3 (once per machine, about 4 minutes on 2 cores) ..." >&2
  .venv/bin/python -m pip download --quiet --no-deps --no-binary :all: "$WHISPER_CPP" -d "$wheels"
  CMAKE_ARGS='-DGGML_NATIVE=OFF -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON -DCMAKE_INSTALL_RPATH=$ORIGIN' \
    .venv/bin/python -m pip wheel --quiet --no-deps --no-cache-dir "$wheels/pywhispercpp-1.5.1.tar.gz" -w "$wheels"
fi
stamp=.venv/.pytest-edge-installed
if [[ ! -f $stamp || pyproject.toml -nt $stamp || scripts/bootstrap.sh -nt $stamp ]]; then
  .venv/bin/python -m pip install --quiet --upgrade pip
  # torch==2.13.0 comes with the executorch extra; where PyPI would give its CUDA build, install
  # the CPU build first (docs/index.md, "Use it in your project").
  .venv/bin/python -m pip install --quiet --find-links "$wheels" --only-binary llama-cpp-python,pywhispercpp \
    -e '.[all,labgrid,test,export,docs]' 'tox>=4' "$LLAMA_CPP" "$WHISPER_CPP"
  # A .venv made before: its llama-cpp-python of the same version may be a -march=native build.
  .venv/bin/python -m pip install --quiet --no-deps --force-reinstall --find-links "$wheels" \
    --only-binary llama-cpp-python "$LLAMA_CPP"
  touch "$stamp"
fi
