"""PyTorch distributed checkpoints (torch.distributed.checkpoint) on an s3gdsfs mount.

    import torch.distributed.checkpoint as dcp
    from s3gds.dcp import S3GDSStorageReader, S3GDSStorageWriter

    dcp.save(state_dict, storage_writer=S3GDSStorageWriter("/mnt/s3/ckpt/step-100"))
    dcp.load(state_dict, storage_reader=S3GDSStorageReader("/mnt/s3/ckpt/step-100"))

The checkpoint is what FileSystemWriter writes, and FileSystemReader reads it
(and S3GDSStorageReader reads FileSystemWriter's): one file per rank (and per
writer thread) holding each item at an offset the .metadata file records,
tensors in torch.save's format, and .metadata written under a temporary name
and renamed. What differs is how tensor bytes travel:

- Saving, a tensor on a CUDA device goes into its file through
  S3GDS_IOC_WRITE where the mount's daemon has CUDA: torch.save's records
  around it are written with write(2), its storage bytes by the daemon's
  copy off the device, with no copy to the host in this process. The storage
  record's CRC-32 in the zip is then 0, as torch.save leaves it with
  torch.serialization.set_crc32_options(False): torch.load does not check it,
  zip tools warn. Everything else goes as FileSystemWriter writes it.
- Loading, a tensor whose destination is on a CUDA device is read from the
  storage record through S3GDS_IOC_READ: into the destination itself when it
  is contiguous and the checkpoint holds it whole and contiguous (or a run of
  rows of it), else into a device buffer of the record from which it is
  copied. Items torch.load would be needed for (extensions, other pickles)
  are read as FileSystemReader reads them.

The choice is load_safetensors's (s3gds._landing): on a mount with the host
stand-in (a test setting), CPU tensors take the ioctls through HostBuffers.
Each object keeps DCPStats of what it moved in ``stats``.
"""

from __future__ import annotations

import collections
import errno
import io
import os
import pickle
import queue
import struct
import threading
import warnings
import zipfile
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

try:
    import torch
    from torch.distributed._shard._utils import narrow_tensor_by_index
    from torch.distributed.checkpoint.filesystem import (
        FileSystemReader,
        FileSystemWriter,
        SerializationFormat,
        _StorageInfo,
    )
    from torch.distributed.checkpoint.planner import LoadItemType, WriteItemType
    from torch.distributed.checkpoint.storage import WriteResult
    from torch.futures import Future
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("s3gds.dcp needs PyTorch 2.4 or later with torch.distributed.checkpoint: "
                      f"pip install torch ({e})") from e

from . import _landing, read_into, write_from
from ._files import discard
from ._hostbuffer import HostBuffer

__all__ = ["S3GDSStorageWriter", "S3GDSStorageReader", "DCPStats"]


@dataclass
class DCPStats:
    """What a writer or reader moved, by path: "ioctl" (S3GDS_IOC_WRITE/READ) or "posix"."""

    ioctl_bytes: int = 0  # tensor bytes through the ioctl
    ioctl_items: int = 0
    posix_bytes: int = 0  # bytes of items (tensors and others) through write(2) or read(2)
    posix_items: int = 0
    reasons: Dict[str, str] = field(default_factory=dict)  # "ioctl"/"posix" -> why, for the first tensor
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, method: str, nbytes: int, reason: Optional[str] = None) -> None:
        with self._lock:
            if method == "ioctl":
                self.ioctl_bytes += nbytes
                self.ioctl_items += 1
            else:
                self.posix_bytes += nbytes
                self.posix_items += 1
            if reason is not None:
                self.reasons.setdefault(method, reason)


class S3GDSStorageWriter(FileSystemWriter):
    """FileSystemWriter whose tensors on a GPU go into their files through S3GDS_IOC_WRITE.

    path and the keyword arguments are FileSystemWriter's; method is
    load_safetensors's ("auto", "ioctl": ValueError where a tensor cannot take
    it, "posix": FileSystemWriter's way for everything). With
    serialization_format other than TORCH_SAVE, or stream extensions, it
    writes as FileSystemWriter does.
    """

    def __init__(self, path: Any, *args: Any, method: str = "auto", **kwargs: Any) -> None:
        _landing.check_method(method)
        super().__init__(path, *args, **kwargs)
        self.method = method
        self.stats = DCPStats()

    def _write_data(self, planner: Any, file_queue: "queue.Queue") -> "Future":
        if self.serialization_format != SerializationFormat.TORCH_SAVE or self.transforms.extensions:
            return super()._write_data(planner, file_queue)
        results: "queue.Queue" = queue.Queue()
        errors: List[BaseException] = []

        def work() -> None:
            try:
                while True:
                    try:
                        path, storage_key, items = file_queue.get_nowait()
                    except queue.Empty:
                        return
                    results.put(self._write_file(planner, os.fspath(path), storage_key, items))
            except BaseException as e:  # raised again in the caller's thread
                errors.append(e)

        threads = [threading.Thread(target=work, name=f"s3gds-dcp-write-{i}")
                   for i in range(1, self.thread_count)]
        for t in threads:
            t.start()
        work()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        out: List[Any] = []
        while not results.empty():
            out += results.get_nowait()
        fut: Future = Future()
        fut.set_result(out)
        return fut

    def _write_file(self, planner: Any, path: str, storage_key: str, items: List[Any]) -> List[Any]:
        out = []
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        pos = 0
        host: List[HostBuffer] = []
        try:
            # As FileSystemWriter: the byte items first, then the tensors.
            for item in [i for i in items if i.type == WriteItemType.BYTE_IO]:
                data = planner.resolve_data(item)
                buf = data.getbuffer()
                try:
                    _write_all(fd, buf)
                    n = len(buf)
                finally:
                    buf.release()
                self.stats.add("posix", n)
                out.append(WriteResult(index=item.index, size_in_bytes=n,
                                       storage_data=_StorageInfo(storage_key, pos, n)))
                pos += n
            for item in [i for i in items if i.type != WriteItemType.BYTE_IO]:
                tensor = planner.resolve_data(item).detach()
                n = self._write_tensor(fd, path, tensor, host)
                out.append(WriteResult(index=item.index, size_in_bytes=n,
                                       storage_data=_StorageInfo(storage_key, pos, n)))
                pos += n
            if self.sync_files:
                os.fsync(fd)  # on the mount: the upload completes here
        except BaseException:
            discard(fd, path)
            raise
        finally:
            for h in host:
                _close(h)
        os.close(fd)
        return out

    def _write_tensor(self, fd: int, path: str, tensor: "torch.Tensor", host: List[HostBuffer]) -> int:
        choice = _landing.choose(path, tensor.device, self.method)
        if choice.method == "posix":
            # FileSystemWriter's way: a CPU copy holding only the tensor's bytes, torch.save.
            t = tensor.cpu()
            if t.untyped_storage().nbytes() != t.numel() * t.element_size():
                t = t.clone()
            buf = io.BytesIO()
            torch.save(t, buf)
            n = _write_all(fd, buf.getbuffer())
            self.stats.add("posix", n, choice.reason)
            return n
        t = tensor
        nbytes = t.numel() * t.element_size()
        if not (t.is_contiguous() and t.storage_offset() == 0 and t.untyped_storage().nbytes() == nbytes):
            t = t.clone(memory_format=torch.contiguous_format)
        n = 0
        for piece in _torch_save_pieces(t):
            if isinstance(piece, bytes):
                n += _write_all(fd, piece)
                continue
            if piece != nbytes:
                raise RuntimeError(f"{path}: torch.save left a hole of {piece} bytes for a tensor of {nbytes}")
            flat = t.reshape(-1).view(torch.uint8)
            if choice.kind == "host-standin":
                src: Any = _host_buffer(host, nbytes)
                staging = torch.frombuffer(src.view(), dtype=torch.uint8)
                staging[:nbytes].copy_(flat)
                del staging
            else:
                src = flat
            res = write_from(src, fd, nbytes)
            if res.nbytes != nbytes:
                raise OSError(errno.EIO, f"S3GDS_IOC_WRITE took {res.nbytes} of {nbytes} bytes", path)
            n += nbytes
        self.stats.add("ioctl", nbytes, choice.reason)
        return n


class S3GDSStorageReader(FileSystemReader):
    """FileSystemReader whose tensors bound for a GPU land there through S3GDS_IOC_READ.

    method as S3GDSStorageWriter's. Reads checkpoints of FileSystemWriter and
    of S3GDSStorageWriter alike.
    """

    def __init__(self, path: Any, *args: Any, method: str = "auto", **kwargs: Any) -> None:
        _landing.check_method(method)
        super().__init__(path, *args, **kwargs)
        self.method = method
        self.stats = DCPStats()

    def read_data(self, plan: Any, planner: Any) -> "Future":
        per_file: Dict[str, List[Any]] = {}
        for req in plan.items:
            per_file.setdefault(self.storage_data[req.storage_index].relative_path, []).append(req)
        for relative_path, reqs in per_file.items():
            path = os.fspath(self.fs.concat_path(self.path, relative_path))
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                for req in sorted(reqs, key=lambda r: self.storage_data[r.storage_index].offset):
                    self._read_item(fd, path, req, planner)
            finally:
                os.close(fd)
        fut: Future = Future()
        fut.set_result(None)
        return fut

    def _read_item(self, fd: int, path: str, req: Any, planner: Any) -> None:
        info = self.storage_data[req.storage_index]
        if req.type == LoadItemType.BYTE_IO or info.transform_descriptors:
            if info.transform_descriptors:
                # Extensions (compression...): FileSystemReader's way, through its stream.
                return self._read_stock(path, req, planner)
            data = _pread_all(fd, info.offset, info.length, path)
            self.stats.add("posix", len(data))
            planner.load_bytes(req, io.BytesIO(data))
            return
        target = planner.resolve_tensor(req).detach()
        choice = _landing.choose(path, target.device, self.method)
        layout = _torch_save_layout(fd, info.offset, info.length) if choice.method == "ioctl" else None
        if layout is None:
            if choice.method == "ioctl" and self.method == "ioctl":
                raise ValueError(f"{path}: item {req.storage_index.fqn!r} is not a plain torch.save "
                                 "of one tensor: method='ioctl' is not possible")
            data = _pread_all(fd, info.offset, info.length, path)
            tensor = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
            tensor = narrow_tensor_by_index(tensor, req.storage_offsets, req.lengths)
            reason = choice.reason if choice.method == "posix" else "not a plain torch.save of one tensor"
            self.stats.add("posix", len(data), reason)
        else:
            tensor = self._land(fd, path, layout, req, target, choice)
        if target.size() != tensor.size():
            raise ValueError(f"{path}: item {req.storage_index.fqn!r} holds {tuple(tensor.size())}, "
                             f"the destination is {tuple(target.size())}")
        if tensor is not target:
            target.copy_(tensor)
        planner.commit_tensor(req, target)

    def _land(self, fd: int, path: str, layout: "_Layout", req: Any, target: "torch.Tensor",
              choice: "_landing.Choice") -> "torch.Tensor":
        """The requested part of the stored tensor through S3GDS_IOC_READ: target itself when
        it could land there, else a view of a buffer holding the storage record."""
        es = layout.dtype.itemsize
        run = layout.byte_run(req.storage_offsets, req.lengths)
        if (run is not None and choice.kind == "cuda" and target.is_contiguous()
                and target.dtype == layout.dtype and target.numel() * es == run[1]):
            if run[1]:
                _read_exact(target, path, fd, layout.data_offset + run[0], run[1])
            self.stats.add("ioctl", run[1], choice.reason)
            return target
        if run is not None:
            offset, length = layout.data_offset + run[0], run[1]
            shape = [int(n) for n in req.lengths]
            stored = None
        else:
            offset, length = layout.data_offset, layout.nbytes
            stored = layout
        buf = _Landing(length, target.device, choice.kind)
        try:
            if length:
                _read_exact(buf.dst, path, fd, offset, length)
            raw = buf.tensor.view(layout.dtype) if length else torch.empty(0, dtype=layout.dtype, device=buf.tensor.device)
            if stored is None:
                tensor = raw.view(shape)
            else:
                tensor = raw.as_strided(stored.size, stored.stride, stored.storage_offset)
                tensor = narrow_tensor_by_index(tensor, req.storage_offsets, req.lengths)
            self.stats.add("ioctl", length, choice.reason)
            if tensor.size() == target.size():
                target.copy_(tensor)
                return target
            return tensor
        finally:
            buf.close()

    def _read_stock(self, path: str, req: Any, planner: Any) -> None:
        from torch.distributed.checkpoint.planner import LoadPlan

        one = LoadPlan([req])
        super().read_data(one, planner).wait()
        self.stats.add("posix", self.storage_data[req.storage_index].length, "a stream extension")


# --- the torch.save format -------------------------------------------------------------------


class _Recorder(io.RawIOBase):
    """A file torch.save writes into under skip_data: its bytes, and holes for the storages."""

    def __init__(self) -> None:
        self.pieces: List[Any] = []  # bytes, or an int: a hole of that many bytes
        self.pos = 0

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        data = bytes(b)
        if self.pieces and isinstance(self.pieces[-1], bytes):
            self.pieces[-1] += data
        else:
            self.pieces.append(data)
        self.pos += len(data)
        return len(data)

    def seek(self, offset: int, whence: int = 0) -> int:
        target = offset if whence == 0 else self.pos + offset
        if whence not in (0, 1) or target < self.pos:
            raise io.UnsupportedOperation("torch.save's layout: only seeks forward over storages")
        if target > self.pos:
            self.pieces.append(target - self.pos)
            self.pos = target
        return self.pos

    def tell(self) -> int:
        return self.pos


def _torch_save_pieces(t: "torch.Tensor") -> List[Any]:
    """What torch.save(t.cpu()) writes, the storage's bytes left as a hole (an int)."""
    try:
        from torch._subclasses.fake_tensor import FakeTensorMode

        with FakeTensorMode():
            placeholder = torch.empty_strided(t.size(), t.stride(), dtype=t.dtype, device="cpu")
    except Exception:  # no fake tensors in this torch: an untouched host allocation does too
        placeholder = torch.empty_strided(t.size(), t.stride(), dtype=t.dtype, device="cpu")
    rec = _Recorder()
    with torch.serialization.skip_data(materialize_fake_tensors=True):
        torch.save(placeholder, rec)
    holes = sum(1 for p in rec.pieces if isinstance(p, int))
    if holes != (1 if t.numel() else 0):
        raise RuntimeError(f"torch.save left {holes} holes for one tensor of {t.numel()} elements")
    return rec.pieces


@dataclass
class _Layout:
    """One tensor saved by torch.save: where its storage's bytes are, and its view of them."""

    data_offset: int  # in the file
    nbytes: int  # the storage record's size
    dtype: "torch.dtype"
    storage_offset: int  # elements
    size: Tuple[int, ...]
    stride: Tuple[int, ...]

    def byte_run(self, offsets: Any, lengths: Any) -> Optional[Tuple[int, int]]:
        """(offset, length) in the storage record of the part [offsets, offsets+lengths) when it
        is one run of bytes in the order of a contiguous tensor of shape lengths, else None."""
        size = list(self.size)
        contiguous = []
        acc = 1
        for n in reversed(size):
            contiguous.append(acc)
            acc *= n
        contiguous.reverse()
        if len(offsets) != len(size) or len(lengths) != len(size):
            return None
        if any(st != c for st, c, n in zip(self.stride, contiguous, size) if n > 1):
            return None
        # One run: every dimension after the last partial one whole, every one before it a
        # single index.
        partial = max((i for i, (n, s) in enumerate(zip(lengths, size)) if n != s), default=-1)
        if any(lengths[i] != 1 for i in range(partial)):
            return None
        es = self.dtype.itemsize
        first = self.storage_offset + sum(o * c for o, c in zip(offsets, contiguous))
        count = 1
        for n in lengths:
            count *= int(n)
        if (first + count) * es > self.nbytes:
            return None
        return first * es, count * es


class _Slice(io.RawIOBase):
    """[offset, offset+length) of a descriptor as a read-only seekable file (pread)."""

    def __init__(self, fd: int, offset: int, length: int) -> None:
        self.fd, self.offset, self.length, self.pos = fd, offset, length, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self.pos, 2: self.length}[whence]
        self.pos = max(0, base + offset)
        return self.pos

    def tell(self) -> int:
        return self.pos

    def readinto(self, b: Any) -> int:
        n = max(0, min(len(b), self.length - self.pos))
        if not n:
            return 0
        got = os.preadv(self.fd, [memoryview(b)[:n]], self.offset + self.pos)
        self.pos += got
        return got


class _NotPlain(Exception):
    pass


class _StorageRef:
    def __init__(self, dtype: Optional["torch.dtype"], key: str, numel: int) -> None:
        self.dtype, self.key, self.numel = dtype, key, numel


class _TensorRef:
    def __init__(self, storage: _StorageRef, storage_offset: int, size: Any, stride: Any,
                 dtype: Optional["torch.dtype"]) -> None:
        self.storage, self.storage_offset = storage, storage_offset
        self.size, self.stride = tuple(size), tuple(stride)
        self.dtype = dtype or storage.dtype


def _rebuild_v2(storage: Any, storage_offset: Any, size: Any, stride: Any, *rest: Any) -> _TensorRef:
    if not isinstance(storage, _StorageRef):
        raise _NotPlain
    return _TensorRef(storage, storage_offset, size, stride, None)


def _rebuild_v3(storage: Any, storage_offset: Any, size: Any, stride: Any, requires_grad: Any,
                hooks: Any, dtype: Any, *rest: Any) -> _TensorRef:
    if not isinstance(storage, _StorageRef) or not isinstance(dtype, torch.dtype):
        raise _NotPlain
    return _TensorRef(storage, storage_offset, size, stride, dtype)


class _StorageType:
    def __init__(self, dtype: Optional["torch.dtype"]) -> None:
        self.dtype = dtype


class _LayoutUnpickler(pickle.Unpickler):
    """Reads torch.save's data.pkl of one tensor without its storage; anything else is _NotPlain."""

    def find_class(self, module: str, name: str) -> Any:
        if module == "torch._utils" and name == "_rebuild_tensor_v2":
            return _rebuild_v2
        if module == "torch._utils" and name == "_rebuild_tensor_v3":
            return _rebuild_v3
        if module == "collections" and name == "OrderedDict":
            return collections.OrderedDict
        if module == "torch.storage" and name == "UntypedStorage":
            return _StorageType(None)
        if module == "torch" and name.endswith("Storage"):
            with warnings.catch_warnings():  # the typed storages are deprecated, and warn
                warnings.simplefilter("ignore")
                dtype = getattr(getattr(torch, name, None), "dtype", None)
            if isinstance(dtype, torch.dtype):
                return _StorageType(dtype)
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        raise _NotPlain

    def persistent_load(self, pid: Any) -> Any:
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"
                and isinstance(pid[1], _StorageType)):
            raise _NotPlain
        return _StorageRef(pid[1].dtype, str(pid[2]), int(pid[4]))


def _torch_save_layout(fd: int, offset: int, length: int) -> Optional[_Layout]:
    """Where a torch.save of one tensor at [offset, offset+length) keeps its bytes, or None."""
    try:
        with zipfile.ZipFile(_Slice(fd, offset, length)) as z:
            names = z.namelist()
            if not names:
                return None
            prefix = names[0].split("/", 1)[0] + "/"
            if prefix + "byteorder" in names and z.read(prefix + "byteorder") != b"little":
                return None
            ref = _LayoutUnpickler(io.BytesIO(z.read(prefix + "data.pkl"))).load()
            if not isinstance(ref, _TensorRef) or ref.dtype is None:
                return None
            info = z.getinfo(prefix + "data/" + ref.storage.key)
            if info.compress_type != zipfile.ZIP_STORED:
                return None
            head = os.pread(fd, 30, offset + info.header_offset)
            if len(head) != 30 or head[:4] != b"PK\x03\x04":
                return None
            name_len, extra_len = struct.unpack("<HH", head[26:30])
            data_offset = offset + info.header_offset + 30 + name_len + extra_len
    except (_NotPlain, zipfile.BadZipFile, KeyError, pickle.UnpicklingError, EOFError,
            ValueError, TypeError, AttributeError, IndexError, OSError):
        return None
    if data_offset + info.file_size > offset + length:
        return None
    return _Layout(data_offset, info.file_size, ref.dtype, int(ref.storage_offset),
                   tuple(int(n) for n in ref.size), tuple(int(s) for s in ref.stride))


# --- helpers -----------------------------------------------------------------------------------


class _Landing:
    """A uint8 buffer of nbytes for one read: a CUDA tensor, or a HostBuffer for the host stand-in."""

    def __init__(self, nbytes: int, device: Any, kind: str) -> None:
        self.host: Optional[HostBuffer] = None
        if kind == "host-standin":
            self.host = HostBuffer(max(nbytes, 1))
            self.tensor = torch.frombuffer(self.host.view(), dtype=torch.uint8)[:nbytes]
            self.dst: Any = self.host
        else:
            self.tensor = torch.empty(nbytes, dtype=torch.uint8, device=device)
            self.dst = self.tensor

    def close(self) -> None:
        if self.host is not None:
            # The name goes now; the mapping when the last view of it does.
            try:
                os.unlink(self.host.name)
            except FileNotFoundError:
                pass


def _read_exact(dst: Any, path: str, fd: int, offset: int, length: int) -> None:
    res = read_into(dst, path, offset=offset, length=length, fd=fd)
    if res.nbytes != length:
        raise ValueError(f"{path}: the daemon delivered {res.nbytes} of {length} bytes at offset "
                         f"{offset}: the file is shorter than its .metadata says, or it changed")


def _host_buffer(host: List[HostBuffer], nbytes: int) -> HostBuffer:
    if not host or host[0].nbytes < nbytes:
        for h in host:
            _close(h)
        host[:] = [HostBuffer(max(nbytes, 1))]
    return host[0]


def _close(h: HostBuffer) -> None:
    try:
        h.close()
    except BufferError:
        pass  # a view still holds the mapping: it goes when the view does


def _write_all(fd: int, data: Any) -> int:
    view = memoryview(data).cast("B")
    done = 0
    while done < len(view):
        done += os.write(fd, view[done:])
    return done


def _pread_all(fd: int, offset: int, length: int, path: str) -> bytes:
    out = bytearray(length)
    view = memoryview(out)
    done = 0
    while done < length:
        n = os.preadv(fd, [view[done:]], offset + done)
        if n == 0:
            raise ValueError(f"{path}: end of file at byte {offset + done}; .metadata says an item "
                             f"runs to byte {offset + length}")
        done += n
    return bytes(out)
