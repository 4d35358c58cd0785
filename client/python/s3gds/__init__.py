"""Read s3gdsfs files straight into CUDA tensors.

    import torch, s3gds
    buf = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
    res = s3gds.read_into(buf, "/mnt/s3/bucket/shard-0001.bin")
    data = buf[:res.nbytes]          # ready for the next kernel
    print(res.transport, res.decline_reason)

read_into opens the file (or takes ``fd=``) and issues the S3GDS_IOC_READ
ioctl with the CUDA IPC handle of the tensor's memory; the daemon writes the
object bytes into the tensor and says how they travelled. docs/ioctl.md in the
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
    STRUCT_SIZE,
    TRANSPORTS,
    XATTR_CAPS,
    XATTR_ETAG,
    XATTR_STATS,
)
from ._hostbuffer import HostBuffer
from ._version import __version__
from .checkpoint import LoadStats, load_safetensors

if TYPE_CHECKING:
    from .datasets import S3GDSItem, S3GDSIterableDataset, S3GDSMapDataset

__all__ = [
    "read_into", "ReadResult", "HostBuffer", "caps", "stats", "etag",
    "load_safetensors", "LoadStats",
    "S3GDSMapDataset", "S3GDSIterableDataset", "S3GDSItem",
    "FLAG_RDMA_ONLY", "FLAG_HTTP_ONLY", "FLAG_HOST_BUFFER", "FLAG_DECLINE_IS_ERROR",
    "TRANSPORTS", "DECLINE_REASONS", "ABI_VERSION", "STRUCT_SIZE", "IOC_READ",
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


def _ioctl(fd, req, path):
    while True:
        try:
            fcntl.ioctl(fd, _abi.IOC_READ, req, True)
            return
        except InterruptedError:
            continue  # the daemon stopped on a signal; the read is safe to repeat
        except OSError as e:
            hint = _ERRNO_HINTS.get(e.errno)
            message = f"{e.strerror}: {hint}" if hint else e.strerror
            raise OSError(e.errno, f"S3GDS_IOC_READ: {message}", path) from None


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
