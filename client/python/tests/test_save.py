"""save_safetensors: the bytes safetensors writes, through the write ioctl on a mount.

Local files check the format against safetensors.torch.save byte for byte and
the refusals; on the write mount (host stand-in) the tensors go through
S3GDS_IOC_WRITE, and the daemon's counters say so.
"""

import errno
import os

import pytest

from . import _path  # noqa: F401

torch = pytest.importorskip("torch")
st = pytest.importorskip("safetensors.torch")

import s3gds  # noqa: E402
from s3gds import checkpoint  # noqa: E402

from .conftest import mount_counters  # noqa: E402


def every_dtype():
    """Two tensors of each dtype safetensors and torch both have, in shapes from () to 4-D."""
    g = torch.Generator().manual_seed(3)
    shapes = [(), (0,), (3, 0, 2), (7,), (2, 3, 5, 1), (4, 9)]
    out = {}
    for i, (name, (attr, size)) in enumerate(sorted(checkpoint.DTYPES.items())):
        dtype = getattr(torch, attr, None)
        if dtype is None:
            continue
        for j in range(2):
            shape = shapes[(i + 3 * j) % len(shapes)]
            n = torch.Size(shape).numel() * size
            raw = torch.randint(0, 2 if dtype == torch.bool else 256, (n,), generator=g, dtype=torch.uint8)
            out[f"t{j}.{name.lower()}"] = raw.view(dtype).reshape(shape) if n else torch.empty(shape, dtype=dtype)
    out["unicode.é"] = torch.arange(6, dtype=torch.float32)
    return out


def model():
    g = torch.Generator().manual_seed(9)
    return {
        "embed.weight": torch.randn(1500, 1024, generator=g),  # 5.9 MiB: a multipart upload
        "layers.0.bias": torch.randn(33, generator=g).to(torch.bfloat16),
        "layers.0.weight": torch.randn(64, 48, generator=g).to(torch.float16),
        "step": torch.tensor(7, dtype=torch.int64),
        "mask": torch.rand(5, 5, generator=g) > 0.5,
        "empty": torch.empty(0, 3),
    }


def as_bytes(t):
    return t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def assert_equal(got, want):
    assert sorted(got) == sorted(want)
    for name, w in want.items():
        assert got[name].dtype == w.dtype and tuple(got[name].shape) == tuple(w.shape), name
        assert as_bytes(got[name]) == as_bytes(w), name


def read(path):
    with open(path, "rb") as f:
        return f.read()


# --- any file system -------------------------------------------------------------------------


@pytest.mark.parametrize("metadata", [None, {"format": "pt"}, {}])
def test_local_file_is_what_safetensors_writes(tmp_path, metadata):
    t = every_dtype()
    p = tmp_path / "all.safetensors"
    stats = s3gds.save_safetensors(t, p, metadata)
    assert read(p) == st.save(t, metadata=metadata)
    assert_equal(st.load_file(str(p)), t)
    assert_equal(s3gds.load_safetensors(p), t)
    assert stats.method == "posix" and "not on an s3gdsfs mount" in stats.reason
    assert set(stats.methods.values()) == {"posix"} and sorted(stats.methods) == sorted(t)
    assert stats.bytes == os.path.getsize(p) == stats.header_bytes + stats.data_bytes
    assert stats.posix_bytes == stats.data_bytes and stats.ioctl_bytes == 0 and stats.ioctl_calls == 0


def test_header_order_alignment_and_metadata(tmp_path):
    import json
    import struct

    t = {"b": torch.zeros(3, dtype=torch.int8), "a": torch.zeros(1, dtype=torch.int8),
         "z": torch.zeros(2, dtype=torch.float64), "m": torch.zeros(2, dtype=torch.float32)}
    p = tmp_path / "order.safetensors"
    s3gds.save_safetensors(t, p, {"note": "ordered"})
    raw = read(p)
    (n,) = struct.unpack("<Q", raw[:8])
    assert n % 8 == 0  # the data starts 8-byte aligned
    header = json.loads(raw[8:8 + n])
    assert list(header) == ["__metadata__", "z", "m", "a", "b"]  # larger dtypes first, then names
    assert header["__metadata__"] == {"note": "ordered"}
    assert [header[k]["data_offsets"] for k in ("z", "m", "a", "b")] == [[0, 16], [16, 24], [24, 25], [25, 28]]
    assert raw == st.save(t, metadata={"note": "ordered"})


def test_non_contiguous_tensors_are_written_from_a_copy(tmp_path):
    base = torch.arange(60, dtype=torch.float32).reshape(6, 10)
    t = {"transposed": base.t(), "strided": base.clone()[:, ::3], "whole": torch.ones(2)}
    p = tmp_path / "nc.safetensors"
    stats = s3gds.save_safetensors(t, p)
    assert sorted(stats.copied) == ["strided", "transposed"]
    assert_equal(st.load_file(str(p)), {k: v.contiguous() for k, v in t.items()})


def test_views_of_one_storage_that_do_not_overlap_are_fine(tmp_path):
    base = torch.arange(20, dtype=torch.int32)
    t = {"lo": base[:10], "hi": base[10:]}
    p = tmp_path / "views.safetensors"
    s3gds.save_safetensors(t, p)
    assert read(p) == st.save({k: v.clone() for k, v in t.items()})


@pytest.mark.parametrize("tensors,error,words", [
    ([torch.ones(1)], TypeError, "tensors must be a dict"),
    ({1: torch.ones(1)}, TypeError, "tensor names must be strings"),
    ({"a": [1.0, 2.0]}, TypeError, "tensor 'a': a list, not a torch.Tensor"),
    ({"__metadata__": torch.ones(1)}, ValueError, "may not be named '__metadata__'"),
    ({"s": torch.eye(3).to_sparse()}, ValueError, "tensor 's': layout torch.sparse_coo is not dense"),
    ({"m": torch.empty(3, device="meta")}, ValueError, "tensor 'm' is on the meta device"),
    ({"f": torch.zeros(2, dtype=torch.float8_e8m0fnu)}, ValueError, "dtype torch.float8_e8m0fnu has no safetensors name"),
])
def test_bad_input(tmp_path, tensors, error, words):
    p = tmp_path / "bad.safetensors"
    with pytest.raises(error) as e:
        s3gds.save_safetensors(tensors, p)
    assert words in str(e.value)
    assert not p.exists()


def test_shared_memory_is_refused_as_safetensors_refuses_it(tmp_path):
    w = torch.randn(4, 4)
    p = tmp_path / "tied.safetensors"
    with pytest.raises(ValueError) as e:
        s3gds.save_safetensors({"embed": w, "lm_head": w}, p)
    assert "tensors 'embed' and 'lm_head' share memory" in str(e.value)
    with pytest.raises(ValueError):
        s3gds.save_safetensors({"all": w, "row": w[1]}, p)  # overlapping views
    with pytest.raises(RuntimeError):
        st.save_file({"embed": w, "lm_head": w}, str(p))  # as the library does
    assert not p.exists()


def test_bad_metadata_and_method(tmp_path):
    p = tmp_path / "m.safetensors"
    with pytest.raises(TypeError, match="metadata must map strings to strings"):
        s3gds.save_safetensors({"a": torch.ones(1)}, p, {"n": 1})
    with pytest.raises(ValueError, match="method 'gpu'"):
        s3gds.save_safetensors({"a": torch.ones(1)}, p, method="gpu")
    with pytest.raises(ValueError, match="method='ioctl' is not possible.*not on an s3gdsfs mount"):
        s3gds.save_safetensors({"a": torch.ones(1)}, p, method="ioctl")
    assert not p.exists()


# --- the write mount: S3GDS_IOC_WRITE through the host stand-in ------------------------------


def test_save_on_mount_goes_through_the_write_ioctl(write_mount, written, counters):
    t = model()
    path = os.path.join(write_mount, "s3gds", "model.safetensors")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    stats = s3gds.save_safetensors(t, path, {"format": "pt"})
    assert stats.method == "ioctl" and "host stand-in" in stats.reason, stats
    assert set(stats.methods.values()) == {"ioctl"}
    assert stats.ioctl_bytes == stats.data_bytes == sum(v.numel() * v.element_size() for v in t.values())
    assert stats.posix_bytes == 0 and stats.posix_calls == 1  # the header
    # The small step, the big embedding alone, then the three small ones together.
    assert stats.ioctl_calls == 3
    moved = counters()
    assert moved["gpu_write"] == stats.data_bytes
    assert moved["posix_write"] == stats.header_bytes
    assert read(path) == st.save(t, metadata={"format": "pt"})
    assert_equal(st.load_file(path), t)
    back, load = s3gds.load_safetensors(path, return_stats=True)
    assert_equal(back, t) and load.method == "ioctl"
    written.record(path)


def test_save_on_mount_every_dtype_and_posix(write_mount, written, counters):
    t = every_dtype()
    d = os.path.join(write_mount, "s3gds")
    os.makedirs(d, exist_ok=True)
    by_ioctl = os.path.join(d, "dtypes.safetensors")
    by_write = os.path.join(d, "dtypes-posix.safetensors")
    a = s3gds.save_safetensors(t, by_ioctl, method="ioctl")
    b = s3gds.save_safetensors(t, by_write, method="posix")
    assert a.method == "ioctl" and b.method == "posix" and b.reason == "method='posix' was asked for"
    moved = counters()
    assert moved["gpu_write"] == a.data_bytes
    assert moved["posix_write"] == a.header_bytes + b.bytes
    assert read(by_ioctl) == read(by_write) == st.save(t)
    assert_equal(st.load_file(by_ioctl), t)
    written.record(by_ioctl)
    written.record(by_write)


def test_failed_save_leaves_nothing(write_mount, monkeypatch):
    d = os.path.join(write_mount, "s3gds")
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "failed.safetensors")
    calls = []

    def failing(src, fd, length=None, **kw):
        calls.append(length)
        if len(calls) == 2:
            raise OSError(errno.EIO, "S3GDS_IOC_WRITE: Input/output error: the upload failed", path)
        return real(src, fd, length, **kw)

    real = s3gds.write_from
    monkeypatch.setattr(s3gds, "write_from", failing)
    t = {"a": torch.randn(300_000), "b": torch.randn(300_000).double()}  # over SAVE_DIRECT: a call each
    with pytest.raises(OSError) as e:
        s3gds.save_safetensors(t, path)
    assert e.value.errno == errno.EIO and len(calls) == 2
    assert not os.path.exists(path) and "failed.safetensors" not in os.listdir(d)


def test_existing_object_is_refused_without_overwrite(write_mount):
    d = os.path.join(write_mount, "s3gds")
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "once.safetensors")
    s3gds.save_safetensors({"a": torch.ones(3)}, path)
    before = read(path)
    with pytest.raises(PermissionError) as e:  # EPERM: replacing needs --allow-overwrite
        s3gds.save_safetensors({"a": torch.zeros(3)}, path)
    assert e.value.errno == errno.EPERM
    assert read(path) == before  # the failed save removed nothing that was there
    assert mount_counters(write_mount)["gpu_write"] > 0
