"""Read s3gdsfs files straight into CUDA tensors.

    import torch, s3gds
    buf = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
    res = s3gds.read_into(buf, "/mnt/s3/bucket/shard-0001.bin")
    data = buf[:res.nbytes]          # ready for the next kernel
    print(res.transport, res.decline_reason)

read_into opens the file (or takes ``fd=``) and issues the S3GDS_IOC_READ
ioctl with the CUDA IPC handle of the tensor's memory; the daemon writes the
object bytes into the tensor and says how they travelled. write_from is the
other way (S3GDS_IOC_WRITE): a tensor's bytes written into a file of a mount
with --allow-writes, uploaded as write(2) would. docs/ioctl.md in the
s3gdsfs repository is the contract. Only the standard library is needed; torch
is imported when a tensor is passed.
"""

import errno
import fcntl
import json
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional, Union

from . import _abi
from ._abi import (  # noqa: F401 (re-exported)
    ABI_VERSION,
    DECLINE_REASONS,
    FLAG_DECLINE_IS_ERROR,
    FLAG_HOST_BUFFER,
    FLAG_HTTP_ONLY,
    FLAG_RDMA_ONLY,
    IOC_READ,
    IOC_WRITE,
    STRUCT_SIZE,
    TRANSPORTS,
    XATTR_CAPS,
    XATTR_ETAG,
    XATTR_STATS,
)
from ._files import discard as _discard
from ._hostbuffer import HostBuffer
from ._version import __version__
from .checkpoint import LoadStats, SaveStats, load_safetensors, save_safetensors

if TYPE_CHECKING:
    from .datasets import S3GDSItem, S3GDSIterableDataset, S3GDSMapDataset

__all__ = [
    "read_into", "ReadResult", "write_from", "WriteResult", "HostBuffer", "caps", "stats", "etag",
    "load_safetensors", "LoadStats", "save_safetensors", "SaveStats",
    "S3GDSMapDataset", "S3GDSIterableDataset", "S3GDSItem",
    "FLAG_RDMA_ONLY", "FLAG_HTTP_ONLY", "FLAG_HOST_BUFFER", "FLAG_DECLINE_IS_ERROR",
    "TRANSPORTS", "DECLINE_REASONS", "ABI_VERSION", "STRUCT_SIZE", "IOC_READ", "IOC_WRITE",
    "__version__",
]

_DATASET_NAMES = ("S3GDSMapDataset", "S3GDSIterableDataset", "S3GDSItem")


def __getattr__(name: str) -> Any:
    # The datasets need torch: import them only when asked for, so that
    # ``import s3gds`` works without it.
    if name in _DATASET_NAMES:
        from . import datasets

        return getattr(datasets, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(frozen=True)
class ReadResult:
    nbytes: int  # bytes delivered; fewer than asked at the end of the object
    transport: Optional[str]  # "rdma", "http", or None when nothing was carried
    decline_reason: Optional[str]  # why RDMA was not used, e.g. "server_501"; None if it was not declined
    seconds: float  # the daemon's time for the read
    rdma_bytes: int  # of nbytes, over RDMA
    http_bytes: int  # of nbytes, over HTTP


# What an errno means from this ioctl, added to the OSError's message.
_ERRNO_HINTS = {
    errno.ENOTTY: "not a file of an s3gdsfs mount",
    errno.EINVAL: "the daemon rejected the request (size, version, flags or reserved fields)",
    errno.ENODEV: "no such CUDA device, or the daemon has no CUDA",
    errno.EBADF: "the daemon could not open the destination (CUDA IPC handle or host buffer)",
    errno.ERANGE: "the destination range lies outside the allocation",
    errno.EACCES: "this caller may not read the file",
    errno.EPERM: "the host stand-in buffer is not a file the caller owns",
    errno.ELOOP: "the host stand-in buffer name passes through a symbolic link",
    errno.EXDEV: "the host stand-in buffer name leaves the stand-in directory",
    errno.ESTALE: "the object changed during the read",
    errno.ECANCELED: "RDMA was declined and the flags forbid falling back to HTTP "
                     "(the reason is counted in user.s3gdsfs.stats)",
    errno.EOPNOTSUPP: "host buffers are not enabled in the daemon",
}


def read_into(dst: Any, path: Union[str, "os.PathLike[str]"], offset: int = 0,
              length: Optional[int] = None, *, flags: int = 0,
              rdma_token: Union[str, bytes, None] = None, fd: Optional[int] = None,
              dst_offset: int = 0) -> ReadResult:
    """Read ``length`` bytes of the file at ``path`` from ``offset`` into ``dst``.

    dst: a contiguous torch CUDA tensor (bytes land at its first element) or a
    HostBuffer. dst_offset: bytes into dst where the first byte lands (0: its
    start). length defaults to dst's size in bytes less dst_offset. flags: FLAG_RDMA_ONLY,
    FLAG_HTTP_ONLY, FLAG_DECLINE_IS_ERROR. rdma_token: a token the caller minted
    for dst (str or bytes), sent to the server as is. fd: an open descriptor of
    the file to use instead of opening ``path``.

    The caller's current CUDA stream is synchronised first; when this returns,
    the bytes are visible to the next kernel. Raises OSError with the errno the
    daemon gave (see docs/ioctl.md).
    """
    if offset < 0:
        raise ValueError(f"offset {offset} is negative")
    if dst_offset < 0:
        raise ValueError(f"dst_offset {dst_offset} is negative")
    if flags & ~(_abi.KNOWN_FLAGS & ~FLAG_HOST_BUFFER):
        raise ValueError(f"flags {flags:#x}: only FLAG_RDMA_ONLY, FLAG_HTTP_ONLY and "
                         "FLAG_DECLINE_IS_ERROR are for callers")

    if isinstance(dst, HostBuffer):
        if dst.closed:
            raise ValueError("dst is a closed HostBuffer")
        flags |= FLAG_HOST_BUFFER
        device, ipc_handle, base_offset, capacity, synchronize = 0, dst.name.encode(), 0, dst.nbytes, None
    else:
        from ._cuda import cuda_destination

        device, ipc_handle, base_offset, capacity, synchronize = cuda_destination(dst)
        device = _daemon_device(device, path, fd)

    if dst_offset > capacity:
        raise ValueError(f"dst_offset {dst_offset} lies past dst's {capacity} bytes")
    wanted_offset = dst_offset
    dst_offset, capacity = base_offset + dst_offset, capacity - dst_offset
    if length is None:
        length = capacity
    if not 0 <= length <= capacity:
        raise ValueError(f"length {length} does not fit in dst's {capacity} bytes"
                         + (f" past dst_offset {wanted_offset}" if wanted_offset else ""))
    token = rdma_token.encode("ascii") if isinstance(rdma_token, str) else bytes(rdma_token or b"")

    req = _abi.pack_request(flags=flags, device=device, offset=offset, length=length,
                            dst_offset=dst_offset, ipc_handle=ipc_handle, rdma_token=token)
    if synchronize is not None:
        synchronize()
    if fd is not None:
        _ioctl(fd, req, path)
    else:
        own_fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            _ioctl(own_fd, req, path)
        finally:
            os.close(own_fd)

    nbytes, elapsed_ns, transport, decline, rdma_bytes, http_bytes = _abi.unpack_outputs(req)
    return ReadResult(
        nbytes=nbytes,
        transport=_name(_abi.TRANSPORTS, transport, "transport"),
        decline_reason=_name(_abi.DECLINE_REASONS, decline, "decline"),
        seconds=elapsed_ns / 1e9,
        rdma_bytes=rdma_bytes,
        http_bytes=http_bytes,
    )


# (st_dev of the mount, this process's CUDA ordinal) -> the daemon's ordinal
_daemon_devices: dict = {}


def _daemon_device(index: int, path: Any, fd: Optional[int]) -> int:
    """The daemon's ordinal of this process's cuda:index, for the mount of path or fd
    (_cuda.daemon_ordinal), looked up once per mount and device."""
    st_dev = os.fstat(fd).st_dev if fd is not None else os.stat(path).st_dev
    key = (st_dev, index)
    got = _daemon_devices.get(key)
    if got is None:
        from ._cuda import daemon_ordinal
        from ._landing import mount_caps

        caps = mount_caps(f"/proc/self/fd/{fd}" if fd is not None else os.fspath(path)) or {}
        got = _daemon_devices[key] = daemon_ordinal(index, caps.get("devices"))
    return got


def _ioctl(fd, req, path, cmd=_abi.IOC_READ, name="S3GDS_IOC_READ", hints=_ERRNO_HINTS):
    while True:
        try:
            fcntl.ioctl(fd, cmd, req, True)
            return
        except InterruptedError:
            continue  # the daemon stopped on a signal before taking a byte; safe to repeat
        except OSError as e:
            hint = hints.get(e.errno)
            message = f"{e.strerror}: {hint}" if hint else e.strerror
            raise OSError(e.errno, f"{name}: {message}", path) from None


@dataclass(frozen=True)
class WriteResult:
    nbytes: int  # bytes written into the file
    offset: int  # the file offset after them: where the next write goes
    seconds: float  # the daemon's time, over every call


# What an errno means from the write ioctl, where it differs from the read's.
_WRITE_ERRNO_HINTS = {
    **_ERRNO_HINTS,
    **{
        errno.EROFS: "the mount was not given --allow-writes",
        errno.EBADF: "the file is not open for writing (or was closed or fsynced already), "
                     "or the daemon could not open the source buffer",
        errno.EINVAL: "writes go in order: the offset must be the bytes written so far "
                      "(or the request's fields were rejected)",
        errno.ERANGE: "the source range lies outside the allocation",
        errno.EIO: "the upload failed; nothing of the file will be visible",
        errno.EFBIG: "the file would need more than 10,000 parts",
    },
}


def write_from(src: Any, path_or_fd: Union[str, "os.PathLike[str]", int], length: Optional[int] = None,
               *, offset: Optional[int] = None, src_offset: int = 0) -> WriteResult:
    """Write ``length`` bytes of ``src`` into a file of an s3gdsfs mount with --allow-writes.

    src: a contiguous torch CUDA tensor (bytes are taken from its first
    element) or a HostBuffer; src_offset: bytes into src where they start;
    length defaults to src's size in bytes less src_offset.

    path_or_fd: a path, created (replaced with --allow-overwrite) and closed
    when the bytes are written: the object is in S3 when this returns; on a
    failure the file is removed and nothing is visible (a failed upload raises
    OSError(EIO)). Or an open
    descriptor of a file open for writing: the bytes go at ``offset`` (default:
    the descriptor's position, which then moves past them, so that write(2)
    and write_from can be mixed); the object appears when the caller closes it.

    The caller's current CUDA stream is synchronised first. Raises OSError with
    the errno the daemon gave (see docs/ioctl.md).
    """
    if src_offset < 0:
        raise ValueError(f"src_offset {src_offset} is negative")
    if offset is not None and offset < 0:
        raise ValueError(f"offset {offset} is negative")
    flags, cuda_src = 0, False
    if isinstance(src, HostBuffer):
        if src.closed:
            raise ValueError("src is a closed HostBuffer")
        flags |= FLAG_HOST_BUFFER
        device, ipc_handle, base_offset, capacity, synchronize = 0, src.name.encode(), 0, src.nbytes, None
    else:
        from ._cuda import cuda_destination

        device, ipc_handle, base_offset, capacity, synchronize = cuda_destination(src)
        cuda_src = True
    if src_offset > capacity:
        raise ValueError(f"src_offset {src_offset} lies past src's {capacity} bytes")
    capacity -= src_offset
    if length is None:
        length = capacity
    if not 0 <= length <= capacity:
        raise ValueError(f"length {length} does not fit in src's {capacity} bytes"
                         + (f" past src_offset {src_offset}" if src_offset else ""))
    if synchronize is not None:
        synchronize()

    if isinstance(path_or_fd, int):
        fd, path, own = path_or_fd, f"<fd {path_or_fd}>", False
        if offset is None:
            offset = os.lseek(fd, 0, os.SEEK_CUR)
    else:
        if offset not in (None, 0):
            raise ValueError("offset: a path is written from its start (pass a descriptor to go on writing)")
        path, offset, own = os.fspath(path_or_fd), 0, True
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    done, seconds = 0, 0.0
    try:
        if cuda_src:
            device = _daemon_device(device, None, fd)
        while True:
            req = _abi.pack_request(flags=flags, device=device, offset=offset + done, length=length - done,
                                    dst_offset=base_offset + src_offset + done, ipc_handle=ipc_handle)
            _ioctl(fd, req, path, _abi.IOC_WRITE, "S3GDS_IOC_WRITE", _WRITE_ERRNO_HINTS)
            nbytes, elapsed_ns = _abi.unpack_outputs(req)[:2]
            seconds += elapsed_ns / 1e9
            done += nbytes
            if not own:
                # The ioctl leaves the descriptor's position; keep it after the bytes.
                os.lseek(fd, offset + done, os.SEEK_SET)
            if done >= length:
                break
            if nbytes == 0:
                raise OSError(errno.EIO, "S3GDS_IOC_WRITE: the daemon took no bytes", path)
            # A short write: the call for the rest says why, or goes on.
    except BaseException:
        if own:
            # Closing would upload what was taken: remove the file, so that a
            # failed write_from of a path leaves no partial object.
            _discard(fd, path)
        raise
    if own:
        os.close(fd)  # the upload ends here; its failure raises
    return WriteResult(nbytes=done, offset=offset + done, seconds=seconds)


def _name(names, value, kind):
    # A newer daemon may report a value this client does not know; keep it visible.
    return names[value] if value < len(names) else f"{kind}({value})"


def caps(path: Union[str, "os.PathLike[str]"]) -> dict:
    """What the daemon can do (the user.s3gdsfs.caps JSON); ask it on the mount root."""
    return json.loads(os.getxattr(path, XATTR_CAPS))


def stats(path: Union[str, "os.PathLike[str]"]) -> dict:
    """The daemon's counters for a file, or for the whole mount on its root."""
    return json.loads(os.getxattr(path, XATTR_STATS))


def etag(path: Union[str, "os.PathLike[str]"]) -> str:
    """The ETag of the object behind a file."""
    return os.getxattr(path, XATTR_ETAG).decode()
