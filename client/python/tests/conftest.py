"""Fixtures of the tests that need a mount (client/python/gotest sets them up).

S3GDS_MOUNT          an s3gdsfs mount of the test bucket, host stand-in enabled
S3GDS_TEST_LOCAL     the directory make_fixtures.py wrote (uploaded under the same keys)
S3GDS_TEST_MANIFEST  JSON {key: {"size": n, "sha256": hex}} of the dataset objects
S3GDS_WRITE_MOUNT    a mount of another bucket with writes allowed (--allow-writes)
S3GDS_TEST_WRITTEN   where the write tests leave {key: sha256} of what they wrote
"""

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
