#!/usr/bin/env bash
# Makes the virtual environment client/python's tests run in (make test-python):
# PY_VENV (default ~/.cache/s3gdsfs/python-venv), from PYTHON (default python3),
# with the pinned packages below. A second run only checks the versions.
#
# torch from PyPI is its CUDA build: pip brings its CUDA runtime wheels too
# (nvidia-cublas, -cudnn, -nccl, ... about 2.4 GB to download, 5.4 GB on
# disk). `pip install --no-deps torch` does not do: libtorch_cpu.so,
# libtorch_python.so and libtorch_cuda.so are linked against libcudart,
# libcupti, libcudnn, libcufile, libcublas, libnccl and more, and `import
# torch` fails without them, GPU or not. With them it imports and runs on
# the CPU of a machine without a GPU or driver. The environment lives outside
# the work tree so that every clone on the machine shares it.
set -euo pipefail

venv=${PY_VENV:-$HOME/.cache/s3gdsfs/python-venv}
python=${PYTHON:-python3}
pins=(torch==2.15.0 safetensors==0.8.0 numpy==2.4.6 pytest==9.2.0 setuptools==84.2.1)

if [ ! -x "$venv/bin/python" ]; then
	echo "creating $venv with $($python --version)"
	mkdir -p "$(dirname "$venv")"
	"$python" -m venv "$venv"
fi

missing=$("$venv/bin/python" - "${pins[@]}" <<'PY'
import sys
from importlib.metadata import PackageNotFoundError, version

for pin in sys.argv[1:]:
    name, want = pin.split("==")
    try:
        have = version(name).split("+")[0]  # torch says 2.15.0+cu132
    except PackageNotFoundError:
        have = None
    if have != want:
        print(pin)
PY
)
if [ -n "$missing" ]; then
	echo "installing into $venv:" $missing
	# shellcheck disable=SC2086 # one pin a word
	"$venv/bin/python" -m pip install --disable-pip-version-check -q $missing
fi
"$venv/bin/python" -c 'import numpy, pytest, safetensors.torch, torch; torch.ones(1).add_(1)' || {
	echo "$venv: the test packages do not import; remove it and run again" >&2
	exit 1
}
echo "python test environment: $venv (${pins[*]})"
