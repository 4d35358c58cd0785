"""Checkpoints saved through a mount that allows writes (docs/operations.md, "Writes").

Each file is read back through the mount, byte for byte against the same save
into memory, and its sha256 goes into S3GDS_TEST_WRITTEN for the Go side to
check against the object straight from S3.
"""

import hashlib
import io
import json
import os

import pytest

from . import _path  # noqa: F401

torch = pytest.importorskip("torch")
st = pytest.importorskip("safetensors.torch")


def tensors():
    g = torch.Generator().manual_seed(5)
    return {
        "embed.weight": torch.randn(3000, 1024, generator=g),  # 12 MiB: a multipart upload
        "layer.bias": torch.randn(77, generator=g).to(torch.bfloat16),
        "step": torch.tensor([1234], dtype=torch.int64),
    }


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def record(written, path, key):
    written[key] = sha256(path)


@pytest.fixture(scope="module")
def written(write_mount, write_manifest):
    got = {}
    yield got
    with open(write_manifest, "w") as f:
        json.dump(got, f)


def test_torch_save(write_mount, written):
    t = tensors()
    path = os.path.join(write_mount, "torch", "model.pt")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        torch.save(t, f)
    want = io.BytesIO()
    torch.save(t, want)
    with open(path, "rb") as f:
        assert f.read() == want.getvalue()
    loaded = torch.load(path)
    for name, v in t.items():
        assert torch.equal(loaded[name], v), name
    assert os.path.getsize(path) == len(want.getvalue())
    assert "model.pt" in os.listdir(os.path.dirname(path))
    record(written, path, "torch/model.pt")


def test_safetensors_save_file(write_mount, written):
    # save_file writes a temporary name in the directory, sets its size
    # (ftruncate) before writing it in order, and renames it.
    t = tensors()
    path = os.path.join(write_mount, "st", "model.safetensors")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    st.save_file(t, path, metadata={"format": "pt"})
    with open(path, "rb") as f:
        assert f.read() == st.save(t, metadata={"format": "pt"})
    loaded = st.load_file(path)
    for name, v in t.items():
        assert torch.equal(loaded[name], v), name
    record(written, path, "st/model.safetensors")


def test_distributed_checkpoint_file_system_writer(write_mount, written):
    import torch.distributed.checkpoint as dcp

    t = tensors()
    path = os.path.join(write_mount, "dcp", "step-1")
    # Its files, then .metadata written under a temporary name and renamed.
    dcp.save(t, storage_writer=dcp.FileSystemWriter(path), no_dist=True)
    names = sorted(os.listdir(path))
    assert ".metadata" in names and not any(n.endswith(".tmp") for n in names), names
    back = {k: torch.empty_like(v) for k, v in t.items()}
    dcp.load(back, storage_reader=dcp.FileSystemReader(path), no_dist=True)
    for name, v in t.items():
        assert torch.equal(back[name], v), name
    for n in names:
        record(written, os.path.join(path, n), "dcp/step-1/" + n)


def test_refusals(write_mount):
    path = os.path.join(write_mount, "refused.bin")
    with open(path, "wb", buffering=0) as f:
        f.write(b"abc")
        with pytest.raises(OSError) as e:
            os.pwrite(f.fileno(), b"x", 0)
        assert e.value.errno == 22  # EINVAL: files are written in order
    with pytest.raises(PermissionError):
        open(path, "ab")  # EPERM: an object is not modified in place
    with pytest.raises(PermissionError):
        open(path, "wb")  # EPERM: replacing needs --allow-overwrite
    with open(path, "rb") as f:
        assert f.read() == b"abc"
    os.remove(path)
    assert not os.path.exists(path)
