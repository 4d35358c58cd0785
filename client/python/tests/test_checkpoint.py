"""load_safetensors against safetensors.torch.load_file: names, dtypes, shapes and bytes."""

import glob
import json
import os
import struct
import subprocess
import sys

import pytest

from . import _path  # noqa: F401

torch = pytest.importorskip("torch")
st = pytest.importorskip("safetensors.torch")
make_fixtures = pytest.importorskip("tests.make_fixtures")

import s3gds  # noqa: E402


def as_bytes(t):
    # Bytes, not values: NaNs compare equal, and float8 needs no arithmetic.
    return t.contiguous().reshape(-1).view(torch.uint8).cpu().numpy().tobytes()


def assert_same(got, ref):
    assert sorted(got) == sorted(ref)
    for name, want in ref.items():
        have = got[name]
        assert have.dtype == want.dtype, name
        assert tuple(have.shape) == tuple(want.shape), name
        assert have.device == want.device, name
        assert as_bytes(have) == as_bytes(want), name
        if want.dtype not in (torch.float8_e4m3fn, torch.float8_e5m2, torch.uint16, torch.uint32, torch.uint64) \
                and not want.dtype.is_complex and not (want.dtype.is_floating_point and torch.isnan(want).any()):
            assert torch.equal(have, want), name


def one_storage(tensors, stats):
    """The tensors not copied for alignment are views of one allocation of stats.allocation_bytes."""
    ptrs = {t.untyped_storage().data_ptr() for n, t in tensors.items() if n not in stats.copied and t.numel()}
    assert len(ptrs) <= 1, ptrs
    for n, t in tensors.items():
        if n not in stats.copied and t.numel():
            assert t.untyped_storage().nbytes() >= stats.data_bytes
            assert t.untyped_storage().nbytes() <= stats.allocation_bytes
    return ptrs


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory):
    d = tmp_path_factory.mktemp("fixtures")
    make_fixtures.main(str(d))
    return str(d)


# --- read(2) path, local files: no mount needed --------------------------------------------

@pytest.mark.parametrize("name", ["all_dtypes", "big_header", "empty", "misaligned"])
def test_local_file_matches_load_file(fixtures, name):
    p = os.path.join(fixtures, "ckpt", name + ".safetensors")
    got, stats = s3gds.load_safetensors(p, device="cpu", return_stats=True)
    assert_same(got, st.load_file(p, device="cpu"))
    assert stats.method == "posix" and "not on an s3gdsfs mount" in stats.reason
    assert stats.header_reads == (2 if name == "big_header" else 1)
    one_storage(got, stats)


def test_every_dtype_and_shape_is_in_the_fixture(fixtures):
    got = s3gds.load_safetensors(os.path.join(fixtures, "ckpt", "all_dtypes.safetensors"))
    assert {t.dtype for t in got.values()} == set(make_fixtures.DTYPES.values())
    for need in (torch.float8_e4m3fn, torch.float8_e5m2, torch.bfloat16, torch.bool):
        assert need in make_fixtures.DTYPES.values()
    shapes = {tuple(t.shape) for t in got.values()}
    assert set(make_fixtures.SHAPES) <= shapes


def test_misaligned_tensors_are_copied(fixtures):
    p = os.path.join(fixtures, "ckpt", "misaligned.safetensors")
    got, stats = s3gds.load_safetensors(p, return_stats=True)
    assert sorted(stats.copied) == ["bf16", "f32", "f32b", "f64", "i16", "i64"]
    base = got["u8"].untyped_storage().data_ptr()
    assert all(got[n].untyped_storage().data_ptr() != base for n in stats.copied)
    assert stats.metadata[p] == {"packed": "unaligned"}


def test_sharded_local(fixtures):
    d = os.path.join(fixtures, "ckpt", "sharded")
    ref = {}
    for shard in sorted(glob.glob(os.path.join(d, "*.safetensors"))):
        ref.update(st.load_file(shard))
    got, stats = s3gds.load_safetensors(os.path.join(d, "model.safetensors.index.json"), return_stats=True)
    assert_same(got, ref)
    assert len(stats.files) == 3 and stats.header_reads == 3
    assert len(one_storage(got, stats)) == 1  # all shards in one allocation


def test_tensors_are_views_of_one_buffer(fixtures):
    got = s3gds.load_safetensors(os.path.join(fixtures, "ckpt", "all_dtypes.safetensors"))
    a, b = got["f32.5x3"], got["i64.7"]
    assert a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
    before = as_bytes(b)
    a.fill_(1.5)  # views of one buffer, not overlapping
    assert as_bytes(b) == before and torch.equal(a, torch.full((5, 3), 1.5))


@pytest.mark.parametrize("name,words", [
    ("truncated_length.safetensors", "fewer than the 8 of the header length"),
    ("header_past_end.safetensors", "header length 1061 runs past the end of the file"),
    ("truncated_header.safetensors", "runs past the end of the file"),
    ("offsets_out_of_range.safetensors", "tensor 'b': data_offsets [8, 24] run past"),
    ("unknown_dtype.safetensors", "tensor 'a': unknown dtype 'F12'"),
    ("shape_mismatch.safetensors", "tensor 'w': data_offsets [0, 20] hold 20 bytes, but shape [2, 3] of I32 needs 24"),
    ("not_json.safetensors", "not UTF-8 JSON"),
    ("index_missing.safetensors.index.json", "weight_map puts tensor 'y'"),
])
def test_bad_input_local(fixtures, name, words):
    with pytest.raises(ValueError) as e:
        s3gds.load_safetensors(os.path.join(fixtures, "bad", name))
    assert words in str(e.value)
    assert name in str(e.value) or "shard.safetensors" in str(e.value)


def test_more_bad_headers(tmp_path):
    def write(header, data=b""):
        p = tmp_path / "x.safetensors"
        make_fixtures.write_raw(str(p), header, data)
        return str(p)

    cases = [
        ({"a": {"dtype": "F32", "shape": [1]}}, "tensor 'a': no 'data_offsets'"),
        ({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 0]}}, "begin after they end"),
        ({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}, "not a list of non-negative integers"),
        ({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0]}}, "is not [begin, end]"),
        ({"a": 3}, "tensor 'a': its entry is not an object"),
        ({"__metadata__": {"k": 1}}, "__metadata__ must map strings to strings"),
    ]
    for header, words in cases:
        with pytest.raises(ValueError, match=None) as e:
            s3gds.load_safetensors(write(header, bytes(4)))
        assert words in str(e.value), (header, str(e.value))
    p = tmp_path / "list.safetensors"
    raw = b"[1, 2]"
    p.write_bytes(struct.pack("<Q", len(raw)) + raw)
    with pytest.raises(ValueError, match="not an object"):
        s3gds.load_safetensors(str(p))
    with pytest.raises(ValueError, match="method='ioctl' is not possible"):
        s3gds.load_safetensors(write({}), method="ioctl")
    with pytest.raises(ValueError, match="method 'gpu'"):
        s3gds.load_safetensors(write({}), method="gpu")
    idx = tmp_path / "bad.index.json"
    idx.write_text(json.dumps({"weight_map": {"a": "../x.safetensors"}}))
    with pytest.raises(ValueError, match="is not a file beside the index"):
        s3gds.load_safetensors(str(idx))


# --- the GPU path on a mount (host stand-in) -------------------------------------------------

def _ckpt_files(local):
    return sorted(os.path.relpath(p, local) for p in glob.glob(os.path.join(local, "ckpt", "*.safetensors")))


def test_mount_files_match_load_file(mount, local):
    files = _ckpt_files(local)
    assert len(files) == 4
    for rel in files:
        ref = st.load_file(os.path.join(local, rel), device="cpu")
        got, stats = s3gds.load_safetensors(os.path.join(mount, rel), device="cpu", return_stats=True)
        assert_same(got, ref)
        assert stats.method == "ioctl", (rel, stats.reason)
        assert "host stand-in" in stats.reason
        assert stats.data_reads == (1 if stats.data_bytes else 0)
        assert stats.transports.get("http", 0) == stats.data_bytes  # every tensor byte through the ioctl
        assert stats.header_reads == (2 if "big_header" in rel else 1)
        one_storage(got, stats)
        # ... and through read(2), the same.
        again, pstats = s3gds.load_safetensors(os.path.join(mount, rel), method="posix", return_stats=True)
        assert pstats.method == "posix" and pstats.transports == {}
        assert_same(again, ref)


def test_mount_gpu_reads_are_counted_by_the_daemon(mount):
    p = os.path.join(mount, "ckpt", "all_dtypes.safetensors")
    before = s3gds.stats(p)
    _, stats = s3gds.load_safetensors(p, return_stats=True)
    after = s3gds.stats(p)
    assert stats.method == "ioctl"
    assert json.dumps(before["counters"]) != json.dumps(after["counters"])


def load_sharded_and_compare(mount, local):
    """Loads the 3-shard checkpoint through its index on the mount and checks
    every tensor against safetensors' load of the local shards."""
    ref = {}
    for shard in sorted(glob.glob(os.path.join(local, "ckpt", "sharded", "*.safetensors"))):
        ref.update(st.load_file(shard))
    got, stats = s3gds.load_safetensors(
        os.path.join(mount, "ckpt", "sharded", "model.safetensors.index.json"), return_stats=True)
    assert_same(got, ref)
    return got, stats


def test_mount_sharded(mount, local):
    got, stats = load_sharded_and_compare(mount, local)
    assert stats.method == "ioctl" and stats.data_reads == 3
    assert len(one_storage(got, stats)) == 1
    assert stats.transports["http"] == stats.data_bytes


def test_mount_bad_input(mount, local):
    for name in os.listdir(os.path.join(local, "bad")):
        if name == "shard.safetensors":
            continue
        with pytest.raises(ValueError) as e:
            s3gds.load_safetensors(os.path.join(mount, "bad", name))
        assert os.path.join(mount, "bad") in str(e.value)


def test_mount_tensors_outlive_the_host_buffer_name(mount):
    # The stand-in's /dev/shm file is unlinked once the bytes landed; the tensors keep the mapping.
    mine = f"s3gds-host-{os.getpid()}-"
    got = s3gds.load_safetensors(os.path.join(mount, "ckpt", "all_dtypes.safetensors"))
    assert [n for n in os.listdir("/dev/shm") if n.startswith(mine)] == []
    total = sum(int(t.float().abs().sum().isfinite()) for t in got.values() if t.dtype == torch.float32)
    assert total > 0


def test_import_without_torch():
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import s3gds\n"
        "assert callable(s3gds.read_into) and s3gds.__version__\n"
        "try:\n"
        "    s3gds.load_safetensors('/nonexistent')\n"
        "except ImportError as e:\n"
        "    assert 'needs PyTorch' in str(e), e\n"
        "else:\n"
        "    raise SystemExit('load_safetensors ran without torch')\n"
        "try:\n"
        "    s3gds.S3GDSMapDataset\n"
        "except ImportError as e:\n"
        "    assert 'needs PyTorch' in str(e), e\n"
        "else:\n"
        "    raise SystemExit('the datasets imported without torch')\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=_path.PYTHON_DIR, capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_mount_large_sections_land_in_parallel_chunks(mount, local, monkeypatch):
    # Chunks of 4 KiB, 3 reads at a time: every shard's section in several
    # reads, each landing at its own place in the one allocation.
    from s3gds import checkpoint

    monkeypatch.setattr(checkpoint, "CHUNK_MIN", 4096)
    monkeypatch.setattr(checkpoint, "READERS", 3)
    got, stats = load_sharded_and_compare(mount, local)
    assert stats.method == "ioctl"
    assert stats.data_reads > 3, stats.data_reads
    assert stats.transports["http"] == stats.data_bytes
    assert len(one_storage(got, stats)) == 1
