#!/usr/bin/env bash
# Makes the virtual environment client/python's tests run in (make test-python):
# PY_VENV (default ~/.cache/s3gdsfs/python-venv), from PYTHON (default python3),
# with the pinned packages below. A second run only checks the versions.
#
# The wheels are downloaded into PY_WHEELS (default ~/.cache/s3gdsfs/wheels)
# and installed from there: a second environment (another PY_VENV, or one
# made again) downloads nothing. pip's own cache keeps a wheel only where the
# index's replies allow caching, which mirrors and proxies often do not.
#
# torch from PyPI is its CUDA build: pip brings its CUDA runtime wheels too
# (nvidia-cublas, -cudnn, -nccl, ... about 3.0 GB to download, 5.7 GB on
# disk, for torch 2.15.0). PyPI holds no CPU-only torch for Linux x86_64: torch 2.15.0 has one
# wheel there for CPython 3.11 on Linux x86_64 (manylinux_2_28, 514 MiB),
# which names the nvidia-* wheels as dependencies; the +cpu builds are on
# download.pytorch.org's own index only. `pip install --no-deps torch` does not do: libtorch_cpu.so,
# libtorch_python.so and libtorch_cuda.so are linked against libcudart,
# libcupti, libcudnn, libcufile, libcublas, libnccl and more, and `import
# torch` fails without them, GPU or not. With them it imports and runs on
# the CPU of a machine without a GPU or driver. The environment lives outside
# the work tree so that every clone on the machine shares it.
set -euo pipefail

venv=${PY_VENV:-$HOME/.cache/s3gdsfs/python-venv}
wheels=${PY_WHEELS:-$HOME/.cache/s3gdsfs/wheels}
python=${PYTHON:-python3}
# transformers: the save_pretrained test through the mount (tests/test_write.py);
# it brings huggingface-hub, tokenizers, regex, pyyaml and a few more, about 25 MB.
pins=(torch==2.15.0 safetensors==0.8.0 numpy==2.4.6 pytest==9.2.0 setuptools==84.2.1 transformers==5.23.0)

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
	if [ ! -d "$wheels" ]; then
		echo "downloading the wheels into $wheels first: torch and its CUDA runtime wheels are" \
			"about 3.0 GB, and the environment takes 5.7 GB once installed; later environments" \
			"install from $wheels without downloading"
	else
		echo "wheels from $wheels ($(du -sh "$wheels" | cut -f1)); only those missing there are downloaded"
	fi
	mkdir -p "$wheels"
	# pip download resolves against the index and fetches only the files
	# the folder does not hold yet ("File was already downloaded").
	# shellcheck disable=SC2086 # one pin a word
	"$venv/bin/python" -m pip download --disable-pip-version-check --progress-bar on -d "$wheels" $missing
	echo "installing from $wheels (a minute or two: 5.7 GB unpacked)"
	# shellcheck disable=SC2086 # one pin a word
	"$venv/bin/python" -m pip install --disable-pip-version-check -q --no-index --find-links "$wheels" $missing
fi
"$venv/bin/python" -c 'import numpy, pytest, safetensors.torch, torch, transformers; torch.ones(1).add_(1)' || {
	echo "$venv: the test packages do not import; remove it and run again" >&2
	exit 1
}
echo "python test environment: $venv (${pins[*]})"
