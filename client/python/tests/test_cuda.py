"""The handle and offset s3gds sends for real torch CUDA tensors.

A second process imports them the way the daemon does (cuIpcOpenMemHandle_v2,
then a copy to base + dst_offset) and the test checks the bytes land in the
tensor and nowhere else. Skipped without torch and a CUDA device.
"""

import errno
import gc
import os
import subprocess
import sys
import tempfile
import unittest

from . import _path

import s3gds
from s3gds import _cuda

try:
    import torch
except ImportError:
    torch = None

HAVE_CUDA = torch is not None and torch.cuda.is_available()

# Imports an IPC handle as the daemon does and fills [dst_offset, dst_offset+n)
# with bytes (i * 131 + 7) % 256; prints the allocation's extent.
IMPORTER = r"""
import ctypes, sys
handle, dst_offset, n, device = bytes.fromhex(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
cu = ctypes.CDLL("libcuda.so.1")
def check(rc, what):
    if rc != 0:
        sys.exit(f"{what}: CUresult {rc}")
class IpcHandle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_ubyte * 64)]  # c_char would stop at the first NUL
check(cu.cuInit(0), "cuInit")
dev, ctx = ctypes.c_int(), ctypes.c_void_p()
check(cu.cuDeviceGet(ctypes.byref(dev), device), "cuDeviceGet")
check(cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
check(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
cu.cuIpcOpenMemHandle_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), IpcHandle, ctypes.c_uint]
base = ctypes.c_uint64()
check(cu.cuIpcOpenMemHandle_v2(ctypes.byref(base), IpcHandle.from_buffer_copy(handle), 1), "cuIpcOpenMemHandle_v2")
range_base, extent = ctypes.c_uint64(), ctypes.c_size_t()
check(cu.cuMemGetAddressRange_v2(ctypes.byref(range_base), ctypes.byref(extent), base), "cuMemGetAddressRange_v2")
if dst_offset + n > extent.value:
    sys.exit(f"destination [{dst_offset}, {dst_offset + n}) outside the allocation of {extent.value}")
src = (ctypes.c_ubyte * n)(*[(i * 131 + 7) % 256 for i in range(n)])
cu.cuMemcpyHtoD_v2.argtypes = [ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t]
check(cu.cuMemcpyHtoD_v2(base.value + dst_offset, src, n), "cuMemcpyHtoD_v2")
check(cu.cuCtxSynchronize(), "cuCtxSynchronize")
check(cu.cuIpcCloseMemHandle(base), "cuIpcCloseMemHandle")
print(extent.value)
"""


def _import_and_fill(dest, n):
    out = subprocess.run(
        [sys.executable, "-c", IMPORTER, dest.ipc_handle.hex(), str(dest.dst_offset), str(n), str(dest.device)],
        capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        raise AssertionError(f"importer failed: {out.stderr}")
    return int(out.stdout)


def _run_with_alloc_conf(conf):
    code = ("import torch, s3gds\n"
            "from s3gds import _cuda\n"
            "t = torch.empty(1 << 20, dtype=torch.uint8, device='cuda')\n"
            "try:\n"
            "    _cuda.cuda_destination(t)\n"
            "    print('accepted')\n"
            "except RuntimeError as e:\n"
            "    print(e)\n")
    env = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF=conf, PYTHONPATH=_path.PYTHON_DIR)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    if out.returncode != 0:
        raise AssertionError(out.stderr)
    return out.stdout


@unittest.skipUnless(HAVE_CUDA, "needs torch and a CUDA device")
class CudaIpcTest(unittest.TestCase):
    def test_handle_and_offset_name_the_tensor_bytes(self):
        # A 1 GiB segment, then two 256 MiB tensors cut from it: the second
        # starts inside the segment, as tensors of the caching allocator do.
        segment = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
        del segment
        first = torch.zeros(256 << 20, dtype=torch.uint8, device="cuda")
        second = torch.zeros(256 << 20, dtype=torch.uint8, device="cuda")
        view = second.view(torch.float32)[1000:3000]  # its own storage offset too

        dest = _cuda.cuda_destination(view)
        self.assertEqual(dest.capacity, 8000)
        extent = _import_and_fill(dest, dest.capacity)
        torch.cuda.synchronize()

        expected = torch.tensor([(i * 131 + 7) % 256 for i in range(8000)], dtype=torch.uint8, device="cuda")
        self.assertTrue(torch.equal(view.view(torch.uint8), expected), "bytes did not land in the view")
        changed = second.count_nonzero().item() - view.view(torch.uint8).count_nonzero().item()
        self.assertEqual(changed, 0, "bytes landed outside the view")
        self.assertEqual(first.count_nonzero().item(), 0)
        print(f"\n  allocation {extent >> 20} MiB, view at {dest.dst_offset} bytes into it", file=sys.stderr)
        self.assertGreaterEqual(extent, dest.dst_offset + dest.capacity)

    def test_shared_storage_returns_to_the_allocator(self):
        torch.cuda.synchronize()
        gc.collect()
        baseline = torch.cuda.memory_allocated()
        t = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
        for _ in range(100):
            _cuda.cuda_destination(t)
        del t
        gc.collect()
        self.assertEqual(torch.cuda.memory_allocated(), baseline,
                         "the shared block did not go back to the caching allocator")

    def test_one_share_per_storage(self):
        _cuda._shares.clear()
        t = torch.empty(1 << 20, dtype=torch.uint8, device="cuda")
        first = _cuda.cuda_destination(t[100:])
        for _ in range(1000):
            again = _cuda.cuda_destination(t[100:])
        self.assertEqual(len(_cuda._shares), 1)
        self.assertEqual((again.ipc_handle, again.dst_offset), (first.ipc_handle, first.dst_offset))

    def test_expandable_segments_refused(self):
        out = _run_with_alloc_conf("expandable_segments:True")
        self.assertIn("expandable_segments:True", out)
        self.assertIn("expandable_segments:False", out)

    def test_cuda_malloc_async_refused(self):
        out = _run_with_alloc_conf("backend:cudaMallocAsync")
        self.assertIn("PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync", out)

    def test_read_into_outside_s3gdsfs(self):
        t = torch.empty(4096, dtype=torch.uint8, device="cuda")
        with tempfile.NamedTemporaryFile() as plain:
            with self.assertRaises(OSError) as cm:
                s3gds.read_into(t, plain.name)
        self.assertEqual(cm.exception.errno, errno.ENOTTY)


if __name__ == "__main__":
    unittest.main()
