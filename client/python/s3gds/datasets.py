"""PyTorch datasets of the files under a prefix of an s3gdsfs mount.

The API follows s3torchconnector's (S3MapDataset, S3IterableDataset):

    from s3gds.datasets import S3GDSMapDataset, S3GDSIterableDataset

    # Map-style: dataset[i] is transform(item); items sorted by key.
    ds = S3GDSMapDataset.from_prefix("/mnt/s3/train/", transform=lambda item: item.read())

    # Iterable, split among ranks and DataLoader workers.
    ds = S3GDSIterableDataset.from_prefix("/mnt/s3/train/shard-", enable_sharding=True,
                                          transform=lambda item: item.to_tensor("cuda"))

A prefix is an S3 prefix spelled as a path: "/mnt/s3/train/" (or
"/mnt/s3/train") is every file under that directory, "/mnt/s3/train/shard-"
every file whose key starts with "train/shard-", in subdirectories too
unless recursive=False. The listing is done once, when the dataset is made.

The transform receives an S3GDSItem (the default transform returns it as is):

- ``item.key``, ``item.path``, ``item.size``;
- ``item.read(size=-1)``, ``readinto``, ``seek``, ``tell``: POSIX reads
  (the item is a raw binary file object);
- ``item.read_into(dst, offset=0, length=None)``: the GPU path
  (S3GDS_IOC_READ) into a CUDA tensor or HostBuffer the caller owns, e.g.
  one buffer reused for every item;
- ``item.to_tensor(device)``: the whole object as a new uint8 tensor on the
  device, through the GPU path where the mount allows it (s3gds._landing) and
  read(2) otherwise; ``item.method`` then says which.

The item's file is closed after the transform returns, unless the transform
returns the item itself.

This module needs torch; ``import s3gds`` does not.
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, List, Optional, Sequence, Union

try:
    import torch
    from torch.utils.data import Dataset, IterableDataset, get_worker_info
except ImportError as e:  # pragma: no cover - exercised by a test that hides torch
    raise ImportError(
        "s3gds.datasets needs PyTorch: pip install torch (or pip install 's3gds[torch]'); "
        "read_into, HostBuffer and the rest of s3gds work without it") from e

from . import _landing
from . import read_into as _read_into

__all__ = ["S3GDSItem", "S3GDSMapDataset", "S3GDSIterableDataset", "list_prefix", "identity"]

PathLike = Union[str, "os.PathLike[str]"]


@dataclass(frozen=True)
class ObjectInfo:
    """A listed file: what a dataset keeps per object (small, picklable)."""

    path: str
    key: str
    size: int


def identity(item: "S3GDSItem") -> "S3GDSItem":
    return item


def list_prefix(prefix: PathLike, recursive: bool = True) -> List[ObjectInfo]:
    """The files under an S3-style prefix of a mount, sorted by key (see the module's doc)."""
    prefix = os.fspath(prefix)
    if os.path.isdir(prefix):
        directory, start = prefix, ""
    else:
        directory, start = os.path.split(prefix)
        directory = directory or "."
        if not os.path.isdir(directory):
            raise FileNotFoundError(f"{prefix}: no directory {directory}")
    directory = os.path.abspath(directory)
    root = _landing.mount_root(directory) or os.path.sep
    found: List[ObjectInfo] = []

    def walk(d: str, top: bool) -> None:
        with os.scandir(d) as it:
            entries = sorted(it, key=lambda e: e.name)
        for e in entries:
            if top and not e.name.startswith(start):
                continue
            if e.is_file(follow_symlinks=False):
                found.append(ObjectInfo(e.path, os.path.relpath(e.path, root).replace(os.sep, "/"),
                                        e.stat(follow_symlinks=False).st_size))
            elif recursive and e.is_dir(follow_symlinks=False):
                walk(e.path, False)

    walk(directory, True)
    found.sort(key=lambda o: o.key)  # S3 order: "a/b" after "a.b", as listings give it
    return found


def _objects(paths: Iterable[PathLike]) -> List[ObjectInfo]:
    out = []
    for p in paths:
        p = os.path.abspath(os.fspath(p))
        root = _landing.mount_root(p) or os.path.sep
        out.append(ObjectInfo(p, os.path.relpath(p, root).replace(os.sep, "/"), os.stat(p).st_size))
    return out


class S3GDSItem(io.RawIOBase):
    """One object of a dataset: a raw binary file over POSIX reads, plus the GPU path."""

    def __init__(self, info: ObjectInfo, device: Any = None):
        super().__init__()
        self.info = info
        self.device = device
        self.method: Optional[str] = None  # how to_tensor landed the bytes: "ioctl" or "posix"
        self.read_result: Any = None  # the last ReadResult of the GPU path
        self._fd: Optional[int] = None
        self._pos = 0

    path = property(lambda self: self.info.path)
    key = property(lambda self: self.info.key)
    size = property(lambda self: self.info.size)

    def __repr__(self) -> str:
        return f"S3GDSItem(key={self.key!r}, size={self.size})"

    def fileno(self) -> int:
        if self.closed:
            raise ValueError(f"{self.path}: the item is closed")
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        return self._fd

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_SET:
            pos = offset
        elif whence == io.SEEK_CUR:
            pos = self._pos + offset
        elif whence == io.SEEK_END:
            pos = self.size + offset
        else:
            raise ValueError(f"whence {whence}")
        if pos < 0:
            raise ValueError(f"negative seek position {pos}")
        self._pos = pos
        return pos

    def readinto(self, b: Any) -> int:
        view = memoryview(b).cast("B")
        n = os.preadv(self.fileno(), [view], self._pos)
        self._pos += n
        return n

    def read(self, size: Optional[int] = -1) -> bytes:
        """size bytes from the position (all that is left with -1), in as few read(2) calls as it takes."""
        if size is None or size < 0:
            size = max(self.size - self._pos, 0)
            buf = bytearray(size)
            view, done = memoryview(buf), 0
            while done < size:
                n = self.readinto(view[done:])
                if n == 0:
                    break
                done += n
            view.release()
            del buf[done:]
            rest = self._read_rest()  # the object grew since it was listed
            return bytes(buf) + rest if rest else bytes(buf)
        data = os.pread(self.fileno(), size, self._pos)
        self._pos += len(data)
        return data

    def _read_rest(self) -> bytes:
        chunks = []
        while True:
            chunk = os.pread(self.fileno(), 1 << 20, self._pos)
            if not chunk:
                return b"".join(chunks)
            self._pos += len(chunk)
            chunks.append(chunk)

    def readall(self) -> bytes:
        return self.read(-1)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        super().close()

    # The GPU path.

    def read_into(self, dst: Any, offset: int = 0, length: Optional[int] = None, *,
                  flags: int = 0, dst_offset: int = 0) -> Any:
        """s3gds.read_into(dst, self.path, ...) on this item's descriptor; returns the ReadResult."""
        self.read_result = _read_into(dst, self.path, offset, length, flags=flags,
                                      fd=self.fileno(), dst_offset=dst_offset)
        return self.read_result

    def to_tensor(self, device: Any = None, *, method: str = "auto") -> "torch.Tensor":
        """The whole object as a new uint8 tensor on device (default: the dataset's device).

        method: "auto", "ioctl" or "posix", as for load_safetensors; item.method
        says which one was used.
        """
        dev = torch.device(device if device is not None else _default_device(self.device))
        choice = _landing.choose(self.path, dev, method)
        alloc = _landing.Allocation(self.size, dev, choice)
        if self.size:
            if choice.method == "ioctl":
                self.read_result = alloc.land_ioctl(self.path, self.fileno(), 0, self.size, 0)
            else:
                alloc.land_posix(self.path, self.fileno(), 0, self.size, 0)
        self.method = choice.method
        return alloc.finish()


def _default_device(device: Any) -> Any:
    if device is not None:
        return device
    return "cuda" if torch.cuda.is_available() else "cpu"


def _apply(transform: Callable[[S3GDSItem], Any], info: ObjectInfo, device: Any) -> Any:
    item = S3GDSItem(info, device)
    try:
        out = transform(item)
    except BaseException:
        item.close()
        raise
    if out is not item:
        item.close()
    return out


class S3GDSMapDataset(Dataset):
    """dataset[i] = transform(item i); items sorted by key.

    For DDP, shard with torch.utils.data.distributed.DistributedSampler, as for
    any map-style dataset; DataLoader workers share out the indices themselves.
    """

    def __init__(self, objects: Sequence[ObjectInfo], *,
                 transform: Callable[[S3GDSItem], Any] = identity, device: Any = None):
        self.objects = list(objects)
        self.transform = transform
        self.device = device

    @classmethod
    def from_prefix(cls, prefix: PathLike, *, transform: Callable[[S3GDSItem], Any] = identity,
                    device: Any = None, recursive: bool = True) -> "S3GDSMapDataset":
        return cls(list_prefix(prefix, recursive), transform=transform, device=device)

    @classmethod
    def from_objects(cls, paths: Iterable[PathLike], *, transform: Callable[[S3GDSItem], Any] = identity,
                     device: Any = None) -> "S3GDSMapDataset":
        return cls(_objects(paths), transform=transform, device=device)

    def __len__(self) -> int:
        return len(self.objects)

    def __getitem__(self, i: int) -> Any:
        return _apply(self.transform, self.objects[i], self.device)


class S3GDSIterableDataset(IterableDataset):
    """Iterates transform(item) over the items in key order.

    enable_sharding=True splits the items among ranks (rank and world_size,
    default torch.distributed's when it is initialised, else 0 and 1) and,
    within a rank, among the DataLoader's workers (get_worker_info()): item j
    goes to the one (rank, worker) with rank * num_workers + worker == j mod
    world_size * num_workers, so every item is read once per epoch. Shards
    differ in length by at most one item. Giving rank or world_size turns
    sharding on.
    """

    def __init__(self, objects: Sequence[ObjectInfo], *,
                 transform: Callable[[S3GDSItem], Any] = identity, device: Any = None,
                 enable_sharding: bool = False, rank: Optional[int] = None,
                 world_size: Optional[int] = None):
        self.objects = list(objects)
        self.transform = transform
        self.device = device
        self.enable_sharding = enable_sharding or rank is not None or world_size is not None
        self.rank = rank
        self.world_size = world_size
        if world_size is not None and world_size < 1:
            raise ValueError(f"world_size {world_size} is not positive")
        if rank is not None and (rank < 0 or (world_size is not None and rank >= world_size)):
            raise ValueError(f"rank {rank} is not in [0, {world_size})")

    @classmethod
    def from_prefix(cls, prefix: PathLike, *, transform: Callable[[S3GDSItem], Any] = identity,
                    device: Any = None, recursive: bool = True, enable_sharding: bool = False,
                    rank: Optional[int] = None, world_size: Optional[int] = None) -> "S3GDSIterableDataset":
        return cls(list_prefix(prefix, recursive), transform=transform, device=device,
                   enable_sharding=enable_sharding, rank=rank, world_size=world_size)

    @classmethod
    def from_objects(cls, paths: Iterable[PathLike], *, transform: Callable[[S3GDSItem], Any] = identity,
                     device: Any = None, enable_sharding: bool = False, rank: Optional[int] = None,
                     world_size: Optional[int] = None) -> "S3GDSIterableDataset":
        return cls(_objects(paths), transform=transform, device=device,
                   enable_sharding=enable_sharding, rank=rank, world_size=world_size)

    def shard(self) -> List[ObjectInfo]:
        """The objects this process (rank, DataLoader worker) iterates over."""
        if not self.enable_sharding:
            return self.objects
        rank, world = self.rank, self.world_size
        if rank is None or world is None:
            dist = torch.distributed
            on = dist.is_available() and dist.is_initialized()
            rank = rank if rank is not None else (dist.get_rank() if on else 0)
            world = world if world is not None else (dist.get_world_size() if on else 1)
        worker = get_worker_info()
        wid, nw = (0, 1) if worker is None else (worker.id, worker.num_workers)
        if not 0 <= rank < world:
            raise ValueError(f"rank {rank} is not in [0, {world})")
        return self.objects[rank * nw + wid::world * nw]

    def __iter__(self) -> Iterator[Any]:
        for info in self.shard():
            yield _apply(self.transform, info, self.device)
