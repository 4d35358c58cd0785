"""The datasets on a mount: every item's bytes by sha256 against the object's, by both paths."""

import hashlib
import os
import subprocess
import sys

import pytest

from . import _path  # noqa: F401

torch = pytest.importorskip("torch")

import s3gds  # noqa: E402
from s3gds.datasets import S3GDSItem, S3GDSIterableDataset, S3GDSMapDataset, list_prefix  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402


def sha(b):
    return hashlib.sha256(b).hexdigest()


def tensor_sha(t):
    return sha(t.cpu().numpy().tobytes())


def under(manifest, prefix):
    return sorted(k for k in manifest if k.startswith(prefix))


# Transforms are module-level so DataLoader workers can unpickle them.
def posix_digest(item):
    return item.key, sha(item.read())


def gpu_digest(item):
    t = item.to_tensor("cpu")  # the host stand-in: lands through the ioctl
    return item.key, tensor_sha(t), item.method, t.dtype, t.numel()


def test_listing_follows_s3_prefixes(mount, manifest):
    keys = lambda prefix, **kw: [o.key for o in list_prefix(os.path.join(mount, prefix), **kw)]  # noqa: E731
    assert keys("ds/train/") == under(manifest, "ds/train/")
    assert keys("ds/train") == under(manifest, "ds/train/")  # a directory: its files
    assert keys("ds/tr") == under(manifest, "ds/tr")  # a prefix: ds/train/... and ds/trainx.bin
    assert "ds/trainx.bin" in keys("ds/tr")
    assert keys("ds/train/shard-00") == under(manifest, "ds/train/shard-00")
    assert keys("ds/train/", recursive=False) == [k for k in under(manifest, "ds/train/") if "/sub/" not in k]
    for o in list_prefix(os.path.join(mount, "ds")):
        assert o.size == manifest[o.key]["size"] and o.path == os.path.join(mount, o.key)
    with pytest.raises(FileNotFoundError):
        list_prefix(os.path.join(mount, "nope", "x"))


def test_map_dataset_posix_bytes(mount, manifest):
    ds = S3GDSMapDataset.from_prefix(os.path.join(mount, "ds/"), transform=posix_digest)
    assert len(ds) == len(manifest)
    got = dict(ds[i] for i in range(len(ds)))
    assert got == {k: v["sha256"] for k, v in manifest.items()}


def test_map_dataset_default_transform_is_the_item(mount, manifest):
    ds = S3GDSMapDataset.from_prefix(os.path.join(mount, "ds/train/"))
    item = ds[3]
    assert isinstance(item, S3GDSItem) and item.key == under(manifest, "ds/train/")[3]
    with item:
        head = item.read(100)
        assert item.tell() == len(head)
        item.seek(-50, os.SEEK_END)
        tail = item.read()
        item.seek(0)
        whole = item.read()
        assert sha(whole) == manifest[item.key]["sha256"]
        assert head == whole[:100] and tail == whole[-50:]
        buf = bytearray(1000)
        item.seek(10)
        n = item.readinto(buf)
        assert bytes(buf[:n]) == whole[10:10 + n] and n == min(1000, len(whole) - 10)
    assert item.closed


def test_map_dataset_gpu_path_with_workers(mount, manifest):
    ds = S3GDSMapDataset.from_prefix(os.path.join(mount, "ds/"), transform=gpu_digest)
    loader = DataLoader(ds, batch_size=None, num_workers=2)
    seen = {}
    for key, digest, method, dtype, n in loader:
        assert method == "ioctl" and dtype == torch.uint8 and n == manifest[key]["size"]
        seen[key] = digest
    assert seen == {k: v["sha256"] for k, v in manifest.items()}


def test_item_read_into_a_reused_host_buffer(mount, manifest):
    keys = under(manifest, "ds/train/")
    biggest = max(manifest[k]["size"] for k in keys)
    with s3gds.HostBuffer(biggest) as buf:
        def land(item):
            res = item.read_into(buf, length=item.size)
            assert res.nbytes == item.size and res.transport in ("http", None)
            return item.key, sha(buf.tobytes()[:res.nbytes])

        got = dict(S3GDSIterableDataset.from_prefix(os.path.join(mount, "ds/train/"), transform=land))
    assert got == {k: manifest[k]["sha256"] for k in keys}


@pytest.mark.parametrize("world_size,workers", [(1, 0), (1, 3), (2, 2), (3, 0)])
def test_iterable_sharding_covers_every_item_once(mount, manifest, world_size, workers):
    keys = under(manifest, "ds/")
    seen = []
    for rank in range(world_size):
        ds = S3GDSIterableDataset.from_prefix(os.path.join(mount, "ds/"), transform=gpu_digest,
                                              enable_sharding=True, rank=rank, world_size=world_size)
        mine = [(k, d) for k, d, *_ in DataLoader(ds, batch_size=None, num_workers=workers)]
        assert abs(len(mine) - len(keys) / world_size) <= max(workers, 1)
        seen += mine
    assert sorted(k for k, _ in seen) == keys  # each once
    assert dict(seen) == {k: manifest[k]["sha256"] for k in keys}


def test_iterable_without_sharding_gives_everything_to_each_worker(mount, manifest):
    ds = S3GDSIterableDataset.from_prefix(os.path.join(mount, "ds/val/"), transform=posix_digest)
    got = list(DataLoader(ds, batch_size=None, num_workers=2))
    assert [k for k, _ in got] == ["ds/val/v-000.bin"] * 2
    assert {d for _, d in got} == {manifest["ds/val/v-000.bin"]["sha256"]}


def test_from_objects_and_posix_method(mount, manifest):
    paths = [os.path.join(mount, k) for k in under(manifest, "ds/train/shard-01")]
    ds = S3GDSMapDataset.from_objects(paths, transform=lambda it: (it.key, it.to_tensor("cpu", method="posix"), it.method))
    for key, t, method in (ds[i] for i in range(len(ds))):
        assert method == "posix" and tensor_sha(t) == manifest[key]["sha256"]


def test_rank_checks(mount):
    with pytest.raises(ValueError):
        S3GDSIterableDataset.from_prefix(os.path.join(mount, "ds/"), rank=2, world_size=2)


def test_example_training_loop(mount, manifest):
    example = os.path.join(_path.PYTHON_DIR, "examples", "dataset.py")
    keys = under(manifest, "ds/train/")
    out = subprocess.run([sys.executable, example, os.path.join(mount, "ds/train/"), "--device", "cpu",
                          "--epochs", "2", "--workers", "2", "--check"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    total = sum(manifest[k]["size"] for k in keys)
    assert f"epoch 2: {len(keys)} files, {total} bytes" in out.stdout, out.stdout
    assert "through ioctl" in out.stdout and "sha256 checked" in out.stdout
