"""Tests of the s3gds package that need neither torch nor a mount.

Run from client/python:  python3 -m unittest
"""

import errno
import gc
import os
import re
import struct
import sys
import tempfile
import types
import unittest

from . import _path

import s3gds
from s3gds import _abi, _cuda


def _header():
    with open(_path.HEADER) as f:
        return f.read()


class HeaderTest(unittest.TestCase):
    """The Python struct against client/c/s3gds.h, whose static_asserts gcc checks (abi/layout_test.go)."""

    def test_layout_matches_static_asserts(self):
        header = _header()
        sizeof = re.findall(r"sizeof\(struct s3gds_read\) == (\d+)", header)
        self.assertEqual([int(s) for s in sizeof], [_abi.STRUCT_SIZE])
        offsets = re.findall(r"offsetof\(struct s3gds_read, (\w+)\) == (\d+)", header)
        sizes = dict(re.findall(r"S3GDS_MEMBER_SIZE\((\w+)\) == (\d+)", header))
        self.assertEqual([name for name, _ in offsets], [name for name, _ in _abi.FIELDS],
                         "members or their order differ")
        from_header = {name: (int(off), int(sizes.get(name, -1))) for name, off in offsets}
        self.assertEqual(_abi.field_offsets(), from_header)

    def test_constants_match_header(self):
        header = _header()
        flags = {name: int(v) for name, v in re.findall(r"#define S3GDS_F_(\w+) (\d+)u", header)}
        self.assertEqual(flags, {
            "RDMA_ONLY": s3gds.FLAG_RDMA_ONLY,
            "HTTP_ONLY": s3gds.FLAG_HTTP_ONLY,
            "HOST_BUFFER": s3gds.FLAG_HOST_BUFFER,
            "DECLINE_IS_ERROR": s3gds.FLAG_DECLINE_IS_ERROR,
        })
        for prefix, names in (("TRANSPORT", s3gds.TRANSPORTS), ("DECLINE", s3gds.DECLINE_REASONS)):
            enum = {int(v): name.lower() for name, v in re.findall(rf"S3GDS_{prefix}_(\w+) = (\d+),", header)}
            self.assertEqual(enum, {i: n or "none" for i, n in enumerate(names)}, prefix)
        version = re.search(r"#define S3GDS_ABI_VERSION (\d+)", header)
        self.assertEqual(int(version.group(1)), s3gds.ABI_VERSION)
        self.assertIn("_IOWR('S', 0x01, struct s3gds_read)", header)
        self.assertEqual(s3gds.IOC_READ, 0xC1005301)
        self.assertEqual(s3gds.IOC_WRITE, 0xC1005302)
        for name in ("CAPS", "ETAG", "STATS"):
            value = re.search(rf'#define S3GDS_XATTR_{name} "([^"]+)"', header).group(1)
            self.assertEqual(value, getattr(s3gds, "XATTR_" + name))

    def test_pack_puts_fields_at_their_offsets(self):
        req = _abi.pack_request(flags=9, device=-2, offset=1 << 40, length=77, dst_offset=513,
                                ipc_handle=b"\xaa" * 64, rdma_token=b"tok")
        at = _abi.field_offsets()

        def field(name):
            off, size = at[name]
            return bytes(req[off:off + size])

        self.assertEqual(len(req), 256)
        self.assertEqual(field("size"), (256).to_bytes(4, "little"))
        self.assertEqual(field("version"), (1).to_bytes(4, "little"))
        self.assertEqual(field("flags"), (9).to_bytes(4, "little"))
        self.assertEqual(field("device"), (-2).to_bytes(4, "little", signed=True))
        self.assertEqual(field("offset"), (1 << 40).to_bytes(8, "little"))
        self.assertEqual(field("length"), (77).to_bytes(8, "little"))
        self.assertEqual(field("dst_offset"), (513).to_bytes(8, "little"))
        self.assertEqual(field("ipc_handle"), b"\xaa" * 64)
        self.assertEqual(field("rdma_token"), b"tok" + bytes(93))
        self.assertEqual(bytes(req[200:]), bytes(56), "out fields and reserved start zero")

    def test_unpack_outputs(self):
        req = _abi.pack_request(flags=0, device=0, offset=0, length=0, dst_offset=0, ipc_handle=b"")
        struct.pack_into("<QQIIQQ", req, 200, 10, 20, 2, 3, 4, 6)
        self.assertEqual(_abi.unpack_outputs(req), (10, 20, 2, 3, 4, 6))

    def test_pack_rejects_oversized_strings(self):
        kw = dict(flags=0, device=0, offset=0, length=0, dst_offset=0)
        with self.assertRaises(ValueError):
            _abi.pack_request(ipc_handle=bytes(65), **kw)
        with self.assertRaises(ValueError):
            _abi.pack_request(ipc_handle=b"", rdma_token=b"t" * 96, **kw)


class HostBufferTest(unittest.TestCase):
    def test_round_trip(self):
        with s3gds.HostBuffer(4096) as buf:
            self.assertTrue(buf.name.startswith("/dev/shm/s3gds-host-"))
            self.assertEqual(os.path.getsize(buf.name), 4096)
            view = buf.view()
            view[10:13] = b"abc"
            view.release()
            with open(buf.name, "rb") as f:
                self.assertEqual(f.read()[10:13], b"abc", "the file and the mapping are one")
            with open(buf.name, "r+b") as f:
                f.seek(4000)
                f.write(b"xyz")
            data = buf.tobytes()
            self.assertEqual((len(data), data[10:13], data[4000:4003]), (4096, b"abc", b"xyz"))
        self.assertTrue(buf.closed)
        self.assertFalse(os.path.exists(buf.name))
        buf.close()  # twice is fine

    def test_unlinked_when_collected(self):
        buf = s3gds.HostBuffer(100)
        name = buf.name
        del buf
        gc.collect()
        self.assertFalse(os.path.exists(name))

    def test_close_with_a_live_view(self):
        buf = s3gds.HostBuffer(100)
        view = buf.view()
        with self.assertRaises(BufferError):
            buf.close()
        view.release()
        buf.close()
        self.assertFalse(os.path.exists(buf.name))

    def test_size_must_be_positive(self):
        with self.assertRaises(ValueError):
            s3gds.HostBuffer(0)


class ReadIntoArgumentsTest(unittest.TestCase):
    def setUp(self):
        f = tempfile.NamedTemporaryFile(delete=False)
        f.write(b"plain file")
        f.close()
        self.plain = f.name
        self.addCleanup(os.unlink, f.name)
        self.buf = s3gds.HostBuffer(64)
        self.addCleanup(self.buf.close)

    def test_plain_file_is_not_s3gdsfs(self):
        with self.assertRaises(OSError) as cm:
            s3gds.read_into(self.buf, self.plain)
        self.assertEqual(cm.exception.errno, errno.ENOTTY)
        self.assertEqual(cm.exception.filename, self.plain)
        self.assertIn("not a file of an s3gdsfs mount", str(cm.exception))

    def test_plain_file_by_fd(self):
        fd = os.open(self.plain, os.O_RDONLY)
        self.addCleanup(os.close, fd)
        with self.assertRaises(OSError) as cm:
            s3gds.read_into(self.buf, None, fd=fd)
        self.assertEqual(cm.exception.errno, errno.ENOTTY)

    def test_rejected_before_the_ioctl(self):
        cases = {
            "length beyond dst": dict(length=65),
            "negative offset": dict(offset=-1),
            "unknown flag": dict(flags=16),
            "host buffer flag is set by HostBuffer": dict(flags=s3gds.FLAG_HOST_BUFFER),
            "token too long": dict(rdma_token="t" * 96),
        }
        for name, kw in cases.items():
            with self.subTest(name), self.assertRaises(ValueError):
                s3gds.read_into(self.buf, "/nonexistent", **kw)

    def test_closed_host_buffer(self):
        self.buf.close()
        with self.assertRaises(ValueError):
            s3gds.read_into(self.buf, self.plain)


# --- CUDA tensors, with stand-ins for torch ---------------------------------------------------

class _StubStorage:
    """Implements what s3gds uses of torch.UntypedStorage."""

    def __init__(self, shared, data_ptr=0x7F0000000000, nbytes=1 << 20):
        self.shared = shared
        self.share_calls = 0
        self.alive = True
        self._cdata = id(self)
        self._data_ptr = data_ptr
        self._nbytes = nbytes

    def _share_cuda_(self):
        self.share_calls += 1
        if isinstance(self.shared, Exception):
            raise self.shared
        return self.shared

    def data_ptr(self):
        return self._data_ptr

    def nbytes(self):
        return self._nbytes


class _StubTensor:
    def __init__(self, storage, *, device_type="cuda", index=1, contiguous=True,
                 storage_offset=10, element_size=4, numel=1000):
        self.device = types.SimpleNamespace(type=device_type, index=index)
        self._storage = storage
        self._contiguous = contiguous
        self._storage_offset = storage_offset
        self._element_size = element_size
        self._numel = numel

    def is_contiguous(self):
        return self._contiguous

    def untyped_storage(self):
        return self._storage

    def storage_offset(self):
        return self._storage_offset

    def element_size(self):
        return self._element_size

    def numel(self):
        return self._numel


def _shared(handle, storage_offset_bytes=1024):
    # (device, handle, storage_size_bytes, storage_offset_bytes, ref_counter_handle,
    #  ref_counter_offset, event_handle, event_sync_required)
    return (1, handle, 1 << 20, storage_offset_bytes, b"/torch_123_456", 7, b"\0" * 64, False)


CUDA_HANDLE = bytes([2]) + b"c" + bytes(range(64))
EXPANDABLE_HANDLE = bytes([1]) + b"e" + bytes(40)


class _FakeTorch:
    """Installs torch, torch.multiprocessing and torch.multiprocessing.reductions stand-ins."""

    def __init__(self, backend="native"):
        self.events = []
        self.released = []
        torch = types.ModuleType("torch")
        stream = types.SimpleNamespace(synchronize=lambda: self.events.append("synchronize"))
        torch.cuda = types.SimpleNamespace(
            get_allocator_backend=lambda: backend,
            current_stream=lambda device: stream)
        torch.UntypedStorage = types.SimpleNamespace(
            _release_ipc_counter_cuda=lambda handle, offset: self.released.append((handle, offset)))
        torch.__path__ = []
        multiprocessing = types.ModuleType("torch.multiprocessing")
        multiprocessing.__path__ = []
        reductions = types.ModuleType("torch.multiprocessing.reductions")

        class StorageWeakRef:
            def __init__(self, storage):
                self.storage = storage

            def expired(self):
                return not self.storage.alive

        reductions.StorageWeakRef = StorageWeakRef
        self.modules = {"torch": torch, "torch.multiprocessing": multiprocessing,
                        "torch.multiprocessing.reductions": reductions}

    def __enter__(self):
        self.saved = {name: sys.modules.get(name) for name in self.modules}
        sys.modules.update(self.modules)
        _cuda._shares.clear()
        return self

    def __exit__(self, *exc):
        for name, module in self.saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
        _cuda._shares.clear()


class CudaTensorTest(unittest.TestCase):
    def test_cudamalloc_handle(self):
        with _FakeTorch() as torch:
            storage = _StubStorage(_shared(CUDA_HANDLE, storage_offset_bytes=256 << 20))
            dest = _cuda.cuda_destination(_StubTensor(storage, storage_offset=10, element_size=4))
        self.assertEqual(dest.device, 1)
        self.assertEqual(dest.ipc_handle, bytes(range(64)))
        self.assertEqual(dest.dst_offset, (256 << 20) + 40, "storage offset plus the tensor's own")
        self.assertEqual(dest.capacity, 4000)
        self.assertEqual(torch.released, [(b"/torch_123_456", 7)], "PyTorch's IPC counter is released")
        self.assertEqual(torch.events, [], "no synchronisation before the call is issued")

    def test_storage_shared_once_while_it_lives(self):
        with _FakeTorch():
            storage = _StubStorage(_shared(CUDA_HANDLE))
            tensor = _StubTensor(storage)
            for _ in range(3):
                _cuda.cuda_destination(tensor)
            self.assertEqual(storage.share_calls, 1)

            storage._data_ptr += 4096  # resized in place
            _cuda.cuda_destination(tensor)
            self.assertEqual(storage.share_calls, 2)

            storage.alive = False  # freed; its _cdata may come back for another storage
            _cuda.cuda_destination(tensor)
            self.assertEqual(storage.share_calls, 3)

    def test_expandable_segments_refused(self):
        with _FakeTorch():
            tensor = _StubTensor(_StubStorage(_shared(EXPANDABLE_HANDLE)))
            with self.assertRaises(RuntimeError) as cm:
                _cuda.cuda_destination(tensor)
        message = str(cm.exception)
        self.assertIn("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", message)
        self.assertIn("expandable_segments:False", message)

    def test_cuda_malloc_async_refused(self):
        with _FakeTorch(backend="cudaMallocAsync"):
            storage = _StubStorage(_shared(CUDA_HANDLE))
            with self.assertRaises(RuntimeError) as cm:
                _cuda.cuda_destination(_StubTensor(storage))
        self.assertIn("PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync", str(cm.exception))
        self.assertEqual(storage.share_calls, 0)

    def test_share_failure_names_cuda_malloc_async(self):
        refusal = RuntimeError("CUDAMallocAsyncAllocator does not yet support shareIpcHandle")
        with _FakeTorch():
            with self.assertRaises(RuntimeError) as cm:
                _cuda.cuda_destination(_StubTensor(_StubStorage(refusal)))
        self.assertIn("PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync", str(cm.exception))
        self.assertIn("does not yet support shareIpcHandle", str(cm.exception))

    def test_unknown_handle_format(self):
        for handle in (bytes([3]) + b"c" + bytes(64), bytes([2]) + b"c" + bytes(10), b"", None):
            with self.subTest(handle=handle), _FakeTorch():
                with self.assertRaises(RuntimeError) as cm:
                    _cuda.cuda_destination(_StubTensor(_StubStorage(_shared(handle))))
                self.assertIn("unknown PyTorch CUDA IPC handle format", str(cm.exception))

    def test_tensor_checks(self):
        with _FakeTorch():
            storage = _StubStorage(_shared(CUDA_HANDLE))
            with self.assertRaises(ValueError):
                _cuda.cuda_destination(_StubTensor(storage, contiguous=False))
            with self.assertRaises(TypeError):
                _cuda.cuda_destination(_StubTensor(storage, device_type="cpu"))
            self.assertEqual(storage.share_calls, 0)

    def test_read_into_synchronises_then_issues_the_ioctl(self):
        with tempfile.NamedTemporaryFile() as plain, _FakeTorch() as torch:
            tensor = _StubTensor(_StubStorage(_shared(CUDA_HANDLE)), numel=16)
            with self.assertRaises(ValueError):
                s3gds.read_into(tensor, plain.name, length=65)  # 64 bytes fit
            self.assertEqual(torch.events, [])
            with self.assertRaises(OSError) as cm:
                s3gds.read_into(tensor, plain.name)
            self.assertEqual(cm.exception.errno, errno.ENOTTY)
            self.assertEqual(torch.events, ["synchronize"])


if __name__ == "__main__":
    unittest.main()
