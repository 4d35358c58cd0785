"""The package builds and installs as a wheel: pure Python, py.typed, version <ABI>.<minor>.<patch>."""

import os
import shutil
import subprocess
import sys
import zipfile

import pytest

from . import _path  # noqa: F401

import s3gds  # noqa: E402
from s3gds import _abi  # noqa: E402


def test_version_carries_the_abi():
    major, minor, patch = s3gds.__version__.split(".")
    assert int(major) == _abi.ABI_VERSION
    assert minor.isdigit() and patch.isdigit()


def test_wheel_builds_installs_and_imports_without_torch(tmp_path):
    pytest.importorskip("setuptools")
    src = tmp_path / "src"
    shutil.copytree(_path.PYTHON_DIR, src, ignore=shutil.ignore_patterns(
        "build", "dist", "*.egg-info", "__pycache__", "tests", "gotest", "examples", "dev"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(tmp_path / "dist"), str(src)], check=True)
    (wheel,) = (tmp_path / "dist").iterdir()
    assert wheel.name == f"s3gds-{s3gds.__version__}-py3-none-any.whl"  # pure Python
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        metadata = z.read(f"s3gds-{s3gds.__version__}.dist-info/METADATA").decode()
    for module in ("__init__", "_abi", "_cuda", "_hostbuffer", "_landing", "_version", "checkpoint", "datasets", "dcp"):
        assert f"s3gds/{module}.py" in names
    assert "s3gds/py.typed" in names
    assert not any(n.endswith(".so") for n in names)
    assert f"Version: {s3gds.__version__}" in metadata
    assert "Requires-Dist: torch" in metadata and 'extra == "torch"' in metadata  # optional only
    # The torch extra brings numpy: without it `import torch` warns and the
    # datasets' workers fail converting samples.
    assert any(line.startswith("Requires-Dist: numpy") and 'extra == "torch"' in line
               for line in metadata.splitlines())

    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
                    str(wheel)], check=True)
    code = ("import sys; sys.modules['torch'] = None\n"
            "import importlib.metadata, s3gds\n"
            f"assert s3gds.__file__.startswith({str(target)!r}), s3gds.__file__\n"
            "assert importlib.metadata.version('s3gds') == s3gds.__version__\n"
            "print(s3gds.__version__)\n")
    env = dict(os.environ, PYTHONPATH=str(target))
    out = subprocess.run([sys.executable, "-c", code], cwd=str(tmp_path), env=env,
                         capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == s3gds.__version__, out.stderr
