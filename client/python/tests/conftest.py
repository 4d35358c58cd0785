"""Fixtures of the tests that need a mount (client/python/gotest sets them up).

S3GDS_MOUNT          an s3gdsfs mount of the test bucket, host stand-in enabled
S3GDS_TEST_LOCAL     the directory make_fixtures.py wrote (uploaded under the same keys)
S3GDS_TEST_MANIFEST  JSON {key: {"size": n, "sha256": hex}} of the dataset objects
S3GDS_WRITE_MOUNT    a mount of another bucket with writes allowed (--allow-writes), host stand-in enabled
S3GDS_TEST_WRITTEN   where the write tests leave {key: sha256} of what they wrote
"""

import hashlib
import json
import os

import pytest

from . import _path  # noqa: F401


def _env(name):
    value = os.environ.get(name)
    if not value:
        pytest.skip(f"{name} is not set (client/python/gotest's TestPythonClientOnMount sets it)")
    return value


@pytest.fixture(scope="session")
def mount():
    return _env("S3GDS_MOUNT")


@pytest.fixture(scope="session")
def local():
    return _env("S3GDS_TEST_LOCAL")


@pytest.fixture(scope="session")
def manifest():
    with open(_env("S3GDS_TEST_MANIFEST")) as f:
        return json.load(f)


@pytest.fixture(scope="session")
def write_mount():
    return _env("S3GDS_WRITE_MOUNT")


@pytest.fixture(scope="session")
def write_manifest():
    return _env("S3GDS_TEST_WRITTEN")


class Written(dict):
    """{key: sha256} of the files the write tests wrote through the mount."""

    def __init__(self, mount):
        super().__init__()
        self.mount = mount

    def record(self, path):
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        self[os.path.relpath(path, self.mount)] = h.hexdigest()


@pytest.fixture(scope="session")
def written(write_mount, write_manifest):
    got = Written(write_mount)
    yield got
    with open(write_manifest, "w") as f:
        json.dump(got, f)


def mount_counters(mount):
    """The daemon's byte counters of writes and GPU reads, from the mount root's user.s3gdsfs.stats."""
    import s3gds

    snap = s3gds.stats(mount)
    writes = snap.get("write_bytes_total") or {}
    reads = snap.get("gpu_read_bytes_total") or {}
    return {
        "gpu_write": int(writes.get("gpu_http", 0)),
        "posix_write": int(writes.get("posix", 0)),
        "gpu_read": int(sum(reads.values())),
    }


@pytest.fixture
def counters(write_mount):
    """counters() is the change of mount_counters since the test began."""
    before = mount_counters(write_mount)
    return lambda: {k: v - before[k] for k, v in mount_counters(write_mount).items()}
