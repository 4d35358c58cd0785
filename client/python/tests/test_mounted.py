"""read_into, caps, stats and etag through a mounted daemon with host buffers enabled.

S3GDS_TEST_MOUNT names the mount; its file "obj" is read. client/go/s3gds's
TestPythonClientThroughFUSE mounts a fake daemon and runs these; without the
variable they are skipped.
"""

import errno
import os
import unittest

from . import _path  # noqa: F401

import s3gds

MOUNT = os.environ.get("S3GDS_TEST_MOUNT")


@unittest.skipUnless(MOUNT, "S3GDS_TEST_MOUNT is not set")
class MountedTest(unittest.TestCase):
    def setUp(self):
        self.obj = os.path.join(MOUNT, "obj")
        with open(self.obj, "rb") as f:
            self.content = f.read()  # plain read(2), the reference
        self.assertGreater(len(self.content), 100_000)
        self.buf = s3gds.HostBuffer(65536)
        self.addCleanup(self.buf.close)

    def test_caps(self):
        caps = s3gds.caps(MOUNT)
        self.assertEqual(caps["abi_version"], s3gds.ABI_VERSION)
        self.assertEqual(caps["cuda_backend"], "host-standin")
        self.assertIsInstance(caps["devices"], list)
        self.assertIn("fabric", caps["rdma"])

    def test_etag(self):
        self.assertRegex(s3gds.etag(self.obj), r'^"?[0-9a-f-]+"?$')

    def test_read_range(self):
        res = s3gds.read_into(self.buf, self.obj, offset=1000, length=5000)
        self.assertEqual((res.nbytes, res.transport, res.decline_reason), (5000, "http", None))
        self.assertEqual((res.http_bytes, res.rdma_bytes), (5000, 0))
        self.assertGreater(res.seconds, 0)
        self.assertEqual(self.buf.tobytes()[:5000], self.content[1000:6000])
        self.assertEqual(self.buf.tobytes()[5000:], bytes(65536 - 5000))

    def test_length_defaults_to_the_buffer(self):
        res = s3gds.read_into(self.buf, self.obj, offset=7)
        self.assertEqual(res.nbytes, 65536)
        self.assertEqual(self.buf.tobytes(), self.content[7:7 + 65536])

    def test_short_at_eof_and_past_it(self):
        res = s3gds.read_into(self.buf, self.obj, offset=len(self.content) - 100)
        self.assertEqual((res.nbytes, res.transport), (100, "http"))
        self.assertEqual(self.buf.tobytes()[:100], self.content[-100:])
        res = s3gds.read_into(self.buf, self.obj, offset=len(self.content) + 1)
        self.assertEqual((res.nbytes, res.transport, res.decline_reason), (0, None, None))

    def test_length_zero(self):
        res = s3gds.read_into(self.buf, self.obj, offset=5, length=0)
        self.assertEqual((res.nbytes, res.transport), (0, None))
        self.assertEqual(self.buf.tobytes(), bytes(65536))

    def test_declined_token(self):
        token = "0" * 81
        res = s3gds.read_into(self.buf, self.obj, length=100, rdma_token=token)
        self.assertEqual((res.nbytes, res.transport, res.decline_reason), (100, "http", "token_ignored"))
        with self.assertRaises(OSError) as cm:
            s3gds.read_into(self.buf, self.obj, length=100, rdma_token=token,
                            flags=s3gds.FLAG_DECLINE_IS_ERROR)
        self.assertEqual(cm.exception.errno, errno.ECANCELED)
        self.assertIn("declined", str(cm.exception))

    def test_invalid_flags(self):
        with self.assertRaises(OSError) as cm:
            s3gds.read_into(self.buf, self.obj, flags=s3gds.FLAG_RDMA_ONLY | s3gds.FLAG_HTTP_ONLY)
        self.assertEqual(cm.exception.errno, errno.EINVAL)

    def test_open_descriptor(self):
        fd = os.open(self.obj, os.O_RDONLY)
        self.addCleanup(os.close, fd)
        res = s3gds.read_into(self.buf, self.obj, offset=3, length=10, fd=fd)
        self.assertEqual(self.buf.tobytes()[:res.nbytes], self.content[3:13])

    def test_stats_count_reads(self):
        before = s3gds.stats(self.obj)["gpu_reads"]
        s3gds.read_into(self.buf, self.obj, length=1)
        self.assertEqual(s3gds.stats(self.obj)["gpu_reads"], before + 1)
        self.assertEqual(s3gds.stats(MOUNT)["gpu_reads"], before + 1)


if __name__ == "__main__":
    unittest.main()
