"""S3GDSStorageWriter and S3GDSStorageReader (s3gds.dcp) against FileSystemWriter/Reader.

On the write mount (host stand-in) CPU tensors take the write and read
ioctls, the way CUDA tensors do on a mount with CUDA; the daemon's counters
must show every tensor byte on that path. Two ranks (gloo) save and load
through it (tests/dcp_ranks.py); files are compared byte for byte with what
was saved, and their sha256 go to the Go side to check against S3.
"""

import io
import json
import os
import subprocess
import sys

import pytest

from . import _path  # noqa: F401

torch = pytest.importorskip("torch")
dcp = pytest.importorskip("torch.distributed.checkpoint")

from s3gds import dcp as s3dcp  # noqa: E402

from . import dcp_ranks  # noqa: E402

RANKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "dcp_ranks.py")


def tensors():
    g = torch.Generator().manual_seed(21)
    return {
        "w": torch.randn(300, 40, generator=g),
        "half": torch.randn(17, generator=g).half(),
        "bits": torch.rand(9, generator=g) > 0.5,
        "scalar": torch.tensor(3.25, dtype=torch.float64),
        "f8": torch.randn(6, generator=g).to(torch.float8_e4m3fn),
        "u16": torch.arange(10, dtype=torch.uint8).view(torch.uint16),
        "rows": torch.randn(8, 6, generator=g).t(),  # not contiguous
        "none": torch.empty(0, 2),
        "meta": {"epoch": 3, "name": "run-7"},
    }


def as_bytes(t):
    return t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def empty_like(sd):
    return {k: dcp_ranks._zeroed(v) for k, v in sd.items()}


def assert_same(got, want):
    for k, w in want.items():
        if isinstance(w, torch.Tensor):
            assert got[k].dtype == w.dtype and got[k].shape == w.shape, k
            assert as_bytes(got[k]) == as_bytes(w), k
        else:
            assert got[k] == w, k


# --- torch.save's format ---------------------------------------------------------------------


@pytest.mark.parametrize("name", ["w", "half", "bits", "scalar", "f8", "u16", "none"])
def test_torch_save_pieces_and_layout(tmp_path, name):
    t = tensors()[name]
    pieces = s3dcp._torch_save_pieces(t)
    holes = [p for p in pieces if isinstance(p, int)]
    assert holes == ([t.numel() * t.element_size()] if t.numel() else [])
    data = b"".join(p if isinstance(p, bytes) else as_bytes(t) for p in pieces)
    ref = io.BytesIO()
    torch.save(t, ref)
    assert len(data) == len(ref.getvalue())  # the same records, the storage's CRC-32 left 0
    assert as_bytes(torch.load(io.BytesIO(data), weights_only=True)) == as_bytes(t)

    p = tmp_path / "item.bin"
    p.write_bytes(b"x" * 123 + data + b"y" * 9)
    fd = os.open(p, os.O_RDONLY)
    try:
        layout = s3dcp._torch_save_layout(fd, 123, len(data))
        stock = s3dcp._torch_save_layout(fd, 0, 0)
    finally:
        os.close(fd)
    assert stock is None
    assert layout.dtype == t.dtype and layout.size == tuple(t.shape) and layout.storage_offset == 0
    raw = p.read_bytes()
    assert raw[layout.data_offset:layout.data_offset + layout.nbytes] == as_bytes(t)


def test_layout_of_anything_but_one_tensor_is_none(tmp_path):
    for obj in ({"a": torch.ones(2)}, [torch.ones(2)], torch.ones(4).to_sparse(), 5):
        buf = io.BytesIO()
        torch.save(obj, buf)
        p = tmp_path / "o.bin"
        p.write_bytes(buf.getvalue())
        fd = os.open(p, os.O_RDONLY)
        try:
            assert s3dcp._torch_save_layout(fd, 0, len(buf.getvalue())) is None, obj
        finally:
            os.close(fd)


def test_byte_run():
    lay = s3dcp._Layout(0, 4 * 6 * 5 * 4, torch.float32, 0, (4, 6, 5), (30, 5, 1))
    assert lay.byte_run([0, 0, 0], [4, 6, 5]) == (0, 480)  # whole
    assert lay.byte_run([1, 0, 0], [2, 6, 5]) == (120, 240)  # rows
    assert lay.byte_run([2, 3, 0], [1, 2, 5]) == ((60 + 15) * 4, 40)  # within one row
    assert lay.byte_run([0, 1, 0], [4, 2, 5]) is None  # a column band: not one run
    assert lay.byte_run([0, 0, 1], [4, 6, 3]) is None
    transposed = s3dcp._Layout(0, 96, torch.float32, 0, (4, 6), (1, 4))
    assert transposed.byte_run([0, 0], [4, 6]) is None


# --- any file system: the posix path, and compatibility with FileSystemWriter/Reader ---------


def test_local_checkpoint_both_ways(tmp_path):
    sd = tensors()
    ours, stock = tmp_path / "ours", tmp_path / "stock"
    writer = s3dcp.S3GDSStorageWriter(ours)
    dcp.save(sd, storage_writer=writer, no_dist=True)
    dcp.save(sd, storage_writer=dcp.FileSystemWriter(stock), no_dist=True)
    assert writer.stats.ioctl_items == 0 and writer.stats.posix_items == len(sd) + 1  # meta has 2 items
    assert "not on an s3gdsfs mount" in writer.stats.reasons["posix"]
    assert sorted(os.listdir(ours)) == sorted(os.listdir(stock))
    for src in (ours, stock):
        for reader in (s3dcp.S3GDSStorageReader(src), dcp.FileSystemReader(src)):
            back = empty_like(sd)
            dcp.load(back, storage_reader=reader, no_dist=True)
            assert_same(back, sd)


def test_method_is_checked(tmp_path):
    with pytest.raises(ValueError, match="method 'gpu'"):
        s3dcp.S3GDSStorageWriter(tmp_path, method="gpu")
    writer = s3dcp.S3GDSStorageWriter(tmp_path / "x", method="ioctl")
    with pytest.raises(BaseException, match="method='ioctl' is not possible"):  # DCP raises CheckpointException
        dcp.save({"a": torch.ones(2)}, storage_writer=writer, no_dist=True)


# --- the write mount ----------------------------------------------------------------------


def test_single_process_on_mount(write_mount, written, counters):
    sd = tensors()
    path = os.path.join(write_mount, "dcp", "single")
    writer = s3dcp.S3GDSStorageWriter(path)
    dcp.save(sd, storage_writer=writer, no_dist=True)
    tensor_bytes = sum(v.numel() * v.element_size() for v in sd.values() if isinstance(v, torch.Tensor))
    assert writer.stats.ioctl_bytes == tensor_bytes and writer.stats.ioctl_items == 8
    assert "host stand-in" in writer.stats.reasons["ioctl"]
    assert counters()["gpu_write"] == tensor_bytes
    names = sorted(os.listdir(path))
    assert ".metadata" in names and not any(n.endswith(".tmp") for n in names), names

    reader = s3dcp.S3GDSStorageReader(path)
    back = empty_like(sd)
    dcp.load(back, storage_reader=reader, no_dist=True)
    assert_same(back, sd)
    assert reader.stats.ioctl_bytes == tensor_bytes
    assert counters()["gpu_read"] == tensor_bytes
    back = empty_like(sd)
    dcp.load(back, storage_reader=dcp.FileSystemReader(path), no_dist=True)
    assert_same(back, sd)
    for n in names:
        written.record(os.path.join(path, n))


def test_two_ranks_on_mount(write_mount, written, counters, tmp_path):
    root = os.path.join(write_mount, "dcp", "ranks")
    ckpt, stock = os.path.join(root, "s3gds"), os.path.join(root, "stock")
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    outs = [str(tmp_path / f"rank{r}.json") for r in range(2)]
    procs = [subprocess.Popen([sys.executable, RANKS, str(r), "2", str(tmp_path / "store"), ckpt, stock, outs[r]],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(2)]
    logs = [p.communicate(timeout=300)[0] for p in procs]
    for r, (p, log) in enumerate(zip(procs, logs)):
        assert p.returncode == 0, f"rank {r} exited {p.returncode}:\n{log}"
    results = []
    for o in outs:
        with open(o) as f:
            results.append(json.load(f))

    moved = counters()
    written_by_ioctl = sum(r["writer"]["ioctl_bytes"] for r in results)
    read_by_ioctl = sum(r["readers"][w]["ioctl_bytes"] for r in results for w in ("s3gds", "stock"))
    assert written_by_ioctl > 1600 * 1024 * 4  # the replicated embedding once, and the rest
    assert all(r["writer"]["ioctl_items"] and r["writer"]["posix_items"] for r in results)
    assert moved["gpu_write"] == written_by_ioctl
    assert moved["gpu_read"] == read_by_ioctl
    for r in results:  # every tensor read through the ioctl, from both checkpoints
        for w in ("s3gds", "stock"):
            assert r["readers"][w]["ioctl_items"] >= 7, r

    # One process, no process group: the whole sharded weight from both ranks' files.
    full = dcp_ranks.full_tensors()
    back = {k: torch.zeros_like(v) for k, v in full.items()}
    for path in (ckpt, stock):
        dcp.load(back, storage_reader=s3dcp.S3GDSStorageReader(path), no_dist=True)
        assert_same(back, {k: v.contiguous() for k, v in full.items()})

    for path in (ckpt, stock):
        names = sorted(os.listdir(path))
        assert names == [".metadata", "__0_0.distcp", "__1_0.distcp"], names
        for n in names:
            written.record(os.path.join(path, n))
