#!/usr/bin/env bash
# Installs llama-cpp-python (the embedded local LLM's runtime) into the active environment from a
# portable build, compiled once and kept in a wheel folder.
#
# Why not pip's default build: llama-cpp-python is an sdist that compiles llama.cpp with
# -march=native, and on this workplace's virtual machines (Xeon with AMX / AVX-512 flags) that
# build dies with SIGSEGV in libggml-cpu on the first completion (measured 2026-12-04). An AVX2
# build runs on them and on any x86-64 machine of the last decade. pip caches a built wheel per
# sdist, not per build flag, so the portable wheel is kept in a folder of its own.
set -euo pipefail
version="${LLAMA_CPP_VERSION:-0.3.36}"
dir="${AUTOMETRICS_WHEEL_CACHE:-$HOME/.cache/autometrics-wheels}/llama-portable"
if [ "$(uname -m)" != "x86_64" ]; then
  pip install -q "llama-cpp-python[server]==$version"  # other architectures: pip's own build
  exit 0
fi
shopt -s nullglob
wheels=("$dir"/llama_cpp_python-"$version"-*.whl)
if ((${#wheels[@]} == 0)); then
  echo "llama_wheel.sh: building llama-cpp-python $version for x86-64 AVX2 (about 10 minutes on 2 cores, once)" >&2
  mkdir -p "$dir"
  CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX512=OFF" \
    pip wheel -q --no-deps --no-cache-dir -w "$dir" "llama-cpp-python==$version"
  wheels=("$dir"/llama_cpp_python-"$version"-*.whl)
fi
pip install -q --force-reinstall --no-deps "${wheels[0]}"
pip install -q "llama-cpp-python[server]==$version"  # its dependencies; the installed build is kept
