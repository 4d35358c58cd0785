"""Where object bytes land: one uint8 allocation on a device, filled through
S3GDS_IOC_READ ("ioctl") or through read(2) ("posix").

The way is chosen per file system and device (choose):

- a CUDA device, on an s3gdsfs mount whose daemon has CUDA (user.s3gdsfs.caps
  "cuda_backend": "cuda"): ioctl into a CUDA tensor;
- the CPU, on a mount whose daemon runs the host stand-in (a test setting,
  "cuda_backend": "host-standin"): ioctl into a HostBuffer under /dev/shm,
  seen as a CPU tensor through torch.frombuffer. This is how the GPU path is
  exercised without a GPU;
- anything else (not an s3gdsfs mount, a daemon without CUDA, the CPU on a
  CUDA daemon, or method="posix"): read(2) into page-aligned host memory,
  then one copy to the device when it is not the CPU.
"""

from __future__ import annotations

import errno
import json
import mmap
import os
import threading
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

from . import _abi
from ._hostbuffer import HostBuffer

METHODS = ("auto", "ioctl", "posix")

_caps_cache: Dict[Tuple[int, str], Optional[dict]] = {}
_caps_lock = threading.Lock()


def mount_root(path: str) -> Optional[str]:
    """The mount point above path (os.path.ismount), or None."""
    p = os.path.realpath(path)
    if not os.path.isdir(p):
        p = os.path.dirname(p)
    while True:
        if os.path.ismount(p):
            return p
        parent = os.path.dirname(p)
        if parent == p:
            return None
        p = parent


def mount_caps(path: str) -> Optional[dict]:
    """user.s3gdsfs.caps of the mount that holds path, or None when it is not s3gdsfs."""
    root = mount_root(path)
    if root is None:
        return None
    try:
        key = (os.stat(root).st_dev, root)
    except OSError:
        return None
    with _caps_lock:
        if key in _caps_cache:
            return _caps_cache[key]
    try:
        caps: Optional[dict] = json.loads(os.getxattr(root, _abi.XATTR_CAPS))
    except OSError as e:
        if e.errno not in (errno.ENODATA, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EPERM, errno.EACCES):
            raise
        caps = None
    except ValueError:
        caps = None
    with _caps_lock:
        _caps_cache[key] = caps
    return caps


@dataclass(frozen=True)
class Choice:
    method: str  # "ioctl" or "posix"
    kind: str  # "cuda", "host-standin" or "posix": what the allocation is
    reason: str  # why, in words


def check_method(method: str) -> None:
    """ValueError naming the choices unless method is one of METHODS."""
    if method not in METHODS:
        raise ValueError(f"method {method!r}: use one of {', '.join(METHODS)}")


def choose(path: str, device: Any, method: str = "auto") -> Choice:
    """How to land the bytes of path on device (see the module's doc)."""
    check_method(method)
    dev_type = _device_type(device)
    if method == "posix":
        return Choice("posix", "posix", "method='posix' was asked for")
    caps = mount_caps(path)
    backend = None if caps is None else caps.get("cuda_backend")
    if caps is None:
        why = f"{path} is not on an s3gdsfs mount"
    elif caps.get("abi_version") != _abi.ABI_VERSION:
        why = f"the daemon speaks ABI {caps.get('abi_version')}, this client {_abi.ABI_VERSION}"
    elif dev_type == "cuda" and backend == "cuda":
        return Choice("ioctl", "cuda", "CUDA device on an s3gdsfs mount with CUDA")
    elif dev_type == "cpu" and backend == "host-standin":
        return Choice("ioctl", "host-standin",
                      "the mount's daemon runs the host stand-in: host buffers stand in for device memory")
    elif dev_type == "cpu":
        why = f"the device is the CPU and the daemon's cuda_backend is {backend!r}"
    else:
        why = f"the device is {dev_type} and the daemon's cuda_backend is {backend!r}"
    if method == "ioctl":
        raise ValueError(f"method='ioctl' is not possible: {why}")
    return Choice("posix", "posix", why)


def _device_type(device: Any) -> str:
    if device is None:
        return "cpu"
    t = getattr(device, "type", None)
    if t is not None:
        return str(t)
    return str(device).split(":", 1)[0]


class Allocation:
    """One uint8 tensor of nbytes on the chosen device, and what read_into needs for it.

    tensor: the uint8 tensor the bytes are seen through. For the host
    stand-in it is a CPU tensor over the HostBuffer's mapping; for posix on a
    non-CPU device it is the host staging tensor until finish() copies it over.
    """

    def __init__(self, nbytes: int, device: Any, choice: Choice):
        import torch

        self.nbytes = nbytes
        self.choice = choice
        self.device = torch.device(device if device is not None else "cpu")
        self._host: Optional[HostBuffer] = None
        self._staging: Optional[mmap.mmap] = None
        if choice.kind == "cuda":
            self.tensor = torch.empty(nbytes, dtype=torch.uint8, device=self.device)
            self.dst: Any = self.tensor
        elif choice.kind == "host-standin":
            # A HostBuffer needs a positive size; the tensor is cut to nbytes.
            self._host = HostBuffer(max(nbytes, 1))
            self.tensor = torch.frombuffer(self._host.view(), dtype=torch.uint8)[:nbytes]
            self.dst = self._host
        else:
            self._staging = mmap.mmap(-1, max(nbytes, 1))  # page-aligned, zero-filled
            self.tensor = torch.frombuffer(self._staging, dtype=torch.uint8)[:nbytes]
            self.dst = None

    def land_ioctl(self, path: str, fd: int, offset: int, length: int, dst_offset: int) -> Any:
        """object[offset, offset+length) into [dst_offset, ...) through the ioctl."""
        from . import read_into

        res = read_into(self.dst, path, offset=offset, length=length, fd=fd, dst_offset=dst_offset)
        if res.nbytes != length:
            raise ValueError(f"{path}: the daemon delivered {res.nbytes} of the {length} bytes at "
                             f"offset {offset}: the file is shorter than its header says, or it changed")
        return res

    def land_posix(self, path: str, fd: int, offset: int, length: int, dst_offset: int) -> int:
        """The same through pread(2); returns the number of read calls."""
        view = memoryview(self._staging)[dst_offset:dst_offset + length]  # type: ignore[arg-type]
        calls, done = 0, 0
        try:
            while done < length:
                n = os.preadv(fd, [view[done:]], offset + done)
                calls += 1
                if n == 0:
                    raise ValueError(f"{path}: end of file after {offset + done} bytes; its header "
                                     f"says the data runs to byte {offset + length}")
                done += n
        finally:
            view.release()
        return calls

    def finish(self):
        """The device tensor; the host stand-in's /dev/shm name is unlinked (the mapping stays)."""
        if self._host is not None:
            try:
                os.unlink(self._host.name)
            except FileNotFoundError:
                pass
        if self.choice.kind == "posix" and self.device.type != "cpu":
            self.tensor = self.tensor.to(self.device)
            self._staging = None  # the host copy goes with the last view of it
        return self.tensor
