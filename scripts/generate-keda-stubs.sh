#!/bin/sh
# Regenerate the KEDA external scaler's Python stubs from the vendored proto:
#   scripts/generate-keda-stubs.sh [OUTPUT_ROOT]     (default: the repository root, i.e. in place)
# grpcio-tools writes the messages and the service, mypy-protobuf their type stubs; both are pinned in
# pyproject's dev extra because tests/keda/test_stubs.py checks the committed files equal fresh ones.
# PYTHON names the interpreter whose packages run protoc (default: .venv/bin/python, else python3).
set -eu
cd "$(dirname "$0")/.."
out="${1:-.}"
python="${PYTHON:-.venv/bin/python}"
[ -x "$python" ] || python=python3
bin="$("$python" -c 'import os, sys; print(os.path.dirname(sys.executable))')"
mkdir -p "$out"
"$python" -m grpc_tools.protoc -I . \
  --plugin=protoc-gen-mypy="$bin/protoc-gen-mypy" --plugin=protoc-gen-mypy_grpc="$bin/protoc-gen-mypy_grpc" \
  --python_out="$out" --grpc_python_out="$out" --mypy_out="$out" --mypy_grpc_out="$out" \
  autoscaler/keda/externalscaler.proto
