"""load_safetensors: a safetensors checkpoint into one device allocation;
save_safetensors: one written, its tensors' bytes through S3GDS_IOC_WRITE where
they are on a GPU (at the end of this module).

    import s3gds
    tensors = s3gds.load_safetensors("/mnt/s3/models/model.safetensors", device="cuda:0")
    tensors, stats = s3gds.load_safetensors("/mnt/s3/models/model.safetensors.index.json",
                                            device="cuda:0", return_stats=True)
    print(stats.method, stats.reason, stats.transports)

The result is what ``safetensors.torch.load_file(path, device=...)`` returns:
the same names, dtypes, shapes and bytes. How it gets there:

1. The header (8-byte little-endian length, then that many bytes of JSON) is
   read with one pread(2) of the first 64 KiB; a longer header takes one more.
2. Every file's data section lands in ONE uint8 allocation on the device:
   through S3GDS_IOC_READ where the mount allows it (s3gds._landing says
   when), otherwise through read(2). A sharded checkpoint (its
   ``*.safetensors.index.json``) lands all its shards in the one allocation,
   each at an offset aligned to 256 bytes.
3. Each tensor is a view of that allocation (slice, ``.view(dtype)``,
   ``.view(shape)``). A view of a dtype of k bytes must start at a multiple of
   k; a tensor whose offset is not (only files not written by the safetensors
   library have them) is copied into its own allocation, and its name is in
   ``LoadStats.copied``.

Malformed input (a truncated header, a header length past the end of the
file, offsets out of range or not matching the shape, an unknown dtype, an
index naming tensors its shard lacks) raises ValueError naming the file and
the tensor or field.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import struct
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple, Union

from . import _landing
from ._files import discard

if TYPE_CHECKING:
    import torch

log = logging.getLogger("s3gds")

HEADER_READ = 64 << 10  # the first read of a file: its length prefix and, usually, the whole header
SHARD_ALIGN = 256  # where each shard's data starts in the one allocation
MAX_HEADER = 100 << 20  # what the safetensors library accepts

# safetensors dtype name -> (torch attribute, size in bytes). The float8 and
# unsigned types that a torch build lacks are left out at load time.
DTYPES: Dict[str, Tuple[str, int]] = {
    "F64": ("float64", 8),
    "F32": ("float32", 4),
    "F16": ("float16", 2),
    "BF16": ("bfloat16", 2),
    "I64": ("int64", 8),
    "I32": ("int32", 4),
    "I16": ("int16", 2),
    "I8": ("int8", 1),
    "U8": ("uint8", 1),
    "BOOL": ("bool", 1),
    "U64": ("uint64", 8),
    "U32": ("uint32", 4),
    "U16": ("uint16", 2),
    "C64": ("complex64", 8),
    "F8_E4M3": ("float8_e4m3fn", 1),
    "F8_E5M2": ("float8_e5m2", 1),
    "F8_E4M3FNUZ": ("float8_e4m3fnuz", 1),
    "F8_E5M2FNUZ": ("float8_e5m2fnuz", 1),
}


@dataclass
class LoadStats:
    """How load_safetensors read a checkpoint (return_stats=True)."""

    method: str = ""  # "ioctl" (S3GDS_IOC_READ) or "posix" (read(2))
    reason: str = ""  # why that method
    device: str = ""
    files: List[str] = field(default_factory=list)  # the safetensors files, in load order
    header_reads: int = 0  # pread calls for the headers, all files
    header_bytes: int = 0  # bytes of length prefixes and headers
    data_bytes: int = 0  # bytes of tensor data landed
    allocation_bytes: int = 0  # size of the one allocation (shards are 256-byte aligned in it)
    data_reads: int = 0  # ioctls, or pread calls, for the data
    transports: Dict[str, int] = field(default_factory=dict)  # ioctl bytes by transport ("http", "rdma")
    declines: Dict[str, int] = field(default_factory=dict)  # RDMA decline reasons, by count
    copied: List[str] = field(default_factory=list)  # tensors copied out of the allocation (misaligned)
    metadata: Dict[str, Dict[str, str]] = field(default_factory=dict)  # each file's __metadata__
    seconds: float = 0.0


@dataclass
class _Entry:
    name: str
    dtype: str
    shape: List[int]
    begin: int
    end: int


@dataclass
class _File:
    path: str
    size: int
    data_start: int  # 8 + header length
    data_len: int  # bytes of the data section the tensors use
    entries: List[_Entry]
    metadata: Dict[str, str]
    base: int = 0  # where its data goes in the allocation


PathLike = Union[str, "os.PathLike[str]"]


def load_safetensors(path: PathLike, device: Any = "cpu", *, method: str = "auto",
                     return_stats: bool = False) -> Any:
    """The tensors of a safetensors file, or of every shard a ``*.index.json`` names.

    device: where the tensors go ("cpu", "cuda:0", a torch.device).
    method: "auto" (S3GDS_IOC_READ where the mount and device allow it,
    otherwise read(2)), "ioctl" (ValueError when it is not possible) or
    "posix". return_stats: also return a LoadStats, as (tensors, stats).
    """
    try:
        import torch
    except ImportError as e:
        raise ImportError("s3gds.load_safetensors needs PyTorch: pip install torch "
                          "(or pip install 's3gds[torch]')") from e

    start = time.perf_counter()
    path = os.fspath(path)
    dev = torch.device(device if device is not None else "cpu")
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    stats = LoadStats(device=str(dev))

    if path.endswith(".json"):
        shard_paths, weight_map = _read_index(path)
    else:
        shard_paths, weight_map = [path], None

    files: List[_File] = []
    for p in shard_paths:
        fd = os.open(p, os.O_RDONLY | os.O_CLOEXEC)
        try:
            f, reads, header_bytes = _read_header(p, fd)
        finally:
            os.close(fd)
        stats.header_reads += reads
        stats.header_bytes += header_bytes
        files.append(f)
        stats.files.append(p)
        if f.metadata:
            stats.metadata[p] = f.metadata
    if weight_map is not None:
        _check_index(path, weight_map, files)
    seen: Dict[str, str] = {}
    for f in files:
        for e in f.entries:
            if e.name in seen:
                raise ValueError(f"tensor {e.name!r} is in both {seen[e.name]} and {f.path}")
            seen[e.name] = f.path

    total = 0
    for f in files:
        f.base = total
        total += -(-f.data_len // SHARD_ALIGN) * SHARD_ALIGN
    stats.data_bytes = sum(f.data_len for f in files)
    stats.allocation_bytes = total

    choice = _landing.choose(files[0].path, dev, method)
    for f in files[1:]:
        other = _landing.choose(f.path, dev, method)
        if other.kind != choice.kind:  # one shard on s3gdsfs, another not: all through read(2)
            choice = _landing.Choice("posix", "posix",
                                     f"the shards are on different file systems: {other.reason}")
            break
    stats.method, stats.reason = choice.method, choice.reason

    alloc = _landing.Allocation(total, dev, choice)
    fds: Dict[str, int] = {}
    try:
        for f in files:
            if f.data_len:
                fds[f.path] = os.open(f.path, os.O_RDONLY | os.O_CLOEXEC)
        if choice.method == "ioctl":
            _land_ioctl_parallel(alloc, files, fds, stats)
        else:
            for f in files:
                if f.data_len:
                    stats.data_reads += alloc.land_posix(f.path, fds[f.path], f.data_start, f.data_len, f.base)
    finally:
        for fd in fds.values():
            os.close(fd)
    buf = alloc.finish()

    tensors: Dict[str, "torch.Tensor"] = {}
    for f in files:
        for e in f.entries:
            tensors[e.name] = _tensor(buf, f.base + e.begin, f.base + e.end, e, stats)
    stats.seconds = time.perf_counter() - start
    log.info("s3gds.load_safetensors %s: %d tensors, %d bytes in %d file(s) to %s by %s (%s), "
             "%d copied for alignment, %.3f s", path, len(tensors), stats.data_bytes, len(files),
             stats.device, stats.method, stats.reason, len(stats.copied), stats.seconds)
    if return_stats:
        return tensors, stats
    return tensors


# The data sections are landed in chunks of at least CHUNK_MIN bytes, READERS
# read calls at a time: the daemon gives each read in flight its share of its
# GET streams, so a lone read of a whole checkpoint would use only the few
# streams one read may take (docs/python.md).
READERS = 16
CHUNK_MIN = 64 << 20


def _chunks(files: List[_File]) -> List[Tuple[_File, int, int, int]]:
    """(file, object offset, length, allocation offset) for every chunk."""
    total = sum(f.data_len for f in files)
    size = max(CHUNK_MIN, -(-total // (READERS * 2)))
    size = -(-size // SHARD_ALIGN) * SHARD_ALIGN
    out = []
    for f in files:
        for done in range(0, f.data_len, size):
            n = min(size, f.data_len - done)
            out.append((f, f.data_start + done, n, f.base + done))
    return out


def _land_ioctl_parallel(alloc: Any, files: List[_File], fds: Dict[str, int], stats: LoadStats) -> None:
    from concurrent.futures import ThreadPoolExecutor

    chunks = _chunks(files)
    if not chunks:
        return
    # fcntl.ioctl releases the GIL for the call, so threads overlap.
    with ThreadPoolExecutor(max_workers=min(READERS, len(chunks)), thread_name_prefix="s3gds-land") as pool:
        results = list(pool.map(lambda c: alloc.land_ioctl(c[0].path, fds[c[0].path], c[1], c[2], c[3]), chunks))
    for res in results:
        stats.data_reads += 1
        if res.http_bytes:
            stats.transports["http"] = stats.transports.get("http", 0) + res.http_bytes
        if res.rdma_bytes:
            stats.transports["rdma"] = stats.transports.get("rdma", 0) + res.rdma_bytes
        if res.decline_reason:
            stats.declines[res.decline_reason] = stats.declines.get(res.decline_reason, 0) + 1


def _tensor(buf: "torch.Tensor", begin: int, end: int, e: _Entry, stats: LoadStats) -> "torch.Tensor":
    import torch

    dtype = getattr(torch, DTYPES[e.dtype][0])
    size = DTYPES[e.dtype][1]
    raw = buf[begin:end]
    if begin % size == 0:
        return raw.view(dtype).view(e.shape)
    # A view of k-byte elements must start at a multiple of k: copy this one.
    stats.copied.append(e.name)
    out = torch.empty(e.shape, dtype=dtype, device=buf.device)
    out.view(-1).view(torch.uint8).copy_(raw)
    return out


def _read_header(path: str, fd: int) -> Tuple[_File, int, int]:
    size = os.fstat(fd).st_size
    head = os.pread(fd, HEADER_READ, 0)
    reads = 1
    if len(head) < 8:
        raise ValueError(f"{path}: truncated header: the file has {len(head)} bytes, fewer than "
                         "the 8 of the header length")
    (n,) = struct.unpack("<Q", head[:8])
    if n > size - 8:
        raise ValueError(f"{path}: header length {n} runs past the end of the file "
                         f"({size} bytes, so at most {size - 8})")
    if n > MAX_HEADER:
        raise ValueError(f"{path}: header length {n} is over the {MAX_HEADER} bytes safetensors allows")
    while len(head) < 8 + n:
        more = os.pread(fd, 8 + n - len(head), len(head))
        reads += 1
        if not more:
            raise ValueError(f"{path}: truncated header: end of file at byte {len(head)}, "
                             f"the header runs to byte {8 + n}")
        head += more
    raw = head[8:8 + n]
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise ValueError(f"{path}: the header ({n} bytes) is not UTF-8 JSON: {e}") from None
    if not isinstance(header, dict):
        raise ValueError(f"{path}: the header is a JSON {type(header).__name__}, not an object")

    data_start = 8 + n
    data_size = size - data_start
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        raise ValueError(f"{path}: __metadata__ must map strings to strings")
    entries = [_entry(path, name, info, data_size) for name, info in header.items()]
    data_len = max((e.end for e in entries), default=0)
    return _File(path, size, data_start, data_len, entries, metadata), reads, 8 + n


def _entry(path: str, name: str, info: Any, data_size: int) -> _Entry:
    where = f"{path}: tensor {name!r}"
    if not isinstance(info, dict):
        raise ValueError(f"{where}: its entry is not an object")
    for key in ("dtype", "shape", "data_offsets"):
        if key not in info:
            raise ValueError(f"{where}: no {key!r}")
    dtype = info["dtype"]
    if dtype not in DTYPES:
        raise ValueError(f"{where}: unknown dtype {dtype!r} (known: {', '.join(DTYPES)})")
    import torch

    if not hasattr(torch, DTYPES[dtype][0]):
        raise ValueError(f"{where}: dtype {dtype} needs torch.{DTYPES[dtype][0]}, "
                         f"which torch {torch.__version__} lacks")
    shape = info["shape"]
    if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
        raise ValueError(f"{where}: shape {shape!r} is not a list of non-negative integers")
    offsets = info["data_offsets"]
    if (not isinstance(offsets, list) or len(offsets) != 2
            or not all(type(o) is int and o >= 0 for o in offsets)):
        raise ValueError(f"{where}: data_offsets {offsets!r} is not [begin, end]")
    begin, end = offsets
    if begin > end:
        raise ValueError(f"{where}: data_offsets {offsets} begin after they end")
    if end > data_size:
        raise ValueError(f"{where}: data_offsets {offsets} run past the data section's "
                         f"{data_size} bytes")
    numel = 1
    for d in shape:
        numel *= d
    if (end - begin) != numel * DTYPES[dtype][1]:
        raise ValueError(f"{where}: data_offsets {offsets} hold {end - begin} bytes, but shape "
                         f"{shape} of {dtype} needs {numel * DTYPES[dtype][1]}")
    return _Entry(name, dtype, shape, begin, end)


def _read_index(path: str) -> Tuple[List[str], Dict[str, str]]:
    with open(path, "rb") as f:
        raw = f.read()
    try:
        index = json.loads(raw)
    except ValueError as e:
        raise ValueError(f"{path}: not a JSON index: {e}") from None
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise ValueError(f"{path}: no 'weight_map' object naming each tensor's shard")
    base = os.path.dirname(path)
    shards: List[str] = []
    for name, shard in weight_map.items():
        if not isinstance(shard, str) or not shard or os.path.isabs(shard) or ".." in shard.split("/"):
            raise ValueError(f"{path}: weight_map[{name!r}] = {shard!r} is not a file beside the index")
        p = os.path.join(base, shard)
        if p not in shards:
            shards.append(p)
    return shards, {k: os.path.join(base, v) for k, v in weight_map.items()}


def _check_index(path: str, weight_map: Dict[str, str], files: List[_File]) -> None:
    for f in files:
        names = {e.name for e in f.entries}
        wanted = {k for k, v in weight_map.items() if v == f.path}
        missing = sorted(wanted - names)
        if missing:
            raise ValueError(f"{path}: weight_map puts tensor {missing[0]!r} in {f.path}, "
                             f"which does not hold it ({len(missing)} missing)")
        extra = sorted(names - set(weight_map))
        if extra:
            raise ValueError(f"{path}: {f.path} holds tensor {extra[0]!r}, which weight_map "
                             "does not name")
        misplaced = sorted(n for n in names & set(weight_map) if weight_map[n] != f.path)
        if misplaced:
            raise ValueError(f"{path}: {f.path} holds tensor {misplaced[0]!r}, which weight_map "
                             f"puts in {weight_map[misplaced[0]]}")


# --- save_safetensors ------------------------------------------------------------------------

# The order safetensors writes tensors in: by dtype, the larger ranks first
# (the order of the Rust crate's Dtype enum, reversed), then by name.
_SAVE_ORDER = ("U64", "I64", "F64", "C64", "F32", "U32", "I32", "BF16", "F16", "U16", "I16",
               "F8_E5M2FNUZ", "F8_E4M3FNUZ", "F8_E4M3", "F8_E5M2", "I8", "U8", "BOOL")
# Through the write ioctl a tensor of SAVE_DIRECT bytes or more goes from its own memory, in one
# call; runs of smaller ones are gathered into one buffer of up to SAVE_BATCH bytes per call.
SAVE_DIRECT = 1 << 20
SAVE_BATCH = 16 << 20
_POSIX_CHUNK = 64 << 20  # a tensor copied off a device for write(2) moves this much at a time


@dataclass
class SaveStats:
    """How save_safetensors wrote a file (its return value)."""

    path: str = ""
    method: str = ""  # "ioctl", "posix", or "mixed" (CUDA and CPU tensors taking different paths)
    reason: str = ""  # why, in words: the ioctl's reason, else the posix one
    methods: Dict[str, str] = field(default_factory=dict)  # tensor name -> "ioctl" or "posix"
    header_bytes: int = 0  # the length prefix and the JSON header, with its padding
    data_bytes: int = 0  # tensor bytes
    bytes: int = 0  # the file's size: header_bytes + data_bytes
    ioctl_bytes: int = 0  # of data_bytes, through S3GDS_IOC_WRITE
    posix_bytes: int = 0  # of data_bytes, through write(2)
    ioctl_calls: int = 0
    posix_calls: int = 0  # write(2) calls, the header's included
    copied: List[str] = field(default_factory=list)  # non-contiguous tensors written from a contiguous copy
    daemon_seconds: float = 0.0  # the daemon's time in the write ioctls
    seconds: float = 0.0


@dataclass
class _Out:
    name: str
    tensor: "torch.Tensor"  # contiguous, detached
    dtype: str
    nbytes: int
    method: str = "posix"
    kind: str = "posix"  # _landing.Choice.kind: "cuda", "host-standin" or "posix"


def save_safetensors(tensors: Dict[str, "torch.Tensor"], path: PathLike,
                     metadata: Optional[Dict[str, str]] = None, *, method: str = "auto") -> SaveStats:
    """Write ``tensors`` to ``path`` as a safetensors file; returns a SaveStats.

    The file is what ``safetensors.torch.save_file`` writes: the 8-byte
    little-endian header length, the JSON header (tensors ordered by dtype,
    larger first, then by name; ``__metadata__`` first when given; padded
    with spaces to a multiple of 8 bytes), then the tensors' bytes in that
    order. ``safetensors.torch.load_file`` and load_safetensors read it back.

    method: "auto" sends CUDA tensors through S3GDS_IOC_WRITE on an s3gdsfs
    mount whose daemon has CUDA (the daemon copies them off the device), and
    everything else through write(2), CUDA tensors copied to the host first;
    on a mount with the host stand-in (a test setting) CPU tensors take the
    ioctl through a HostBuffer. "ioctl" raises ValueError where a tensor
    cannot take it; "posix" always uses write(2). Works on any file system.

    Non-contiguous tensors are written from a contiguous copy. A failure
    removes the file and raises (OSError with the daemon's errno).
    """
    try:
        import torch  # noqa: F401
    except ImportError as e:
        raise ImportError("s3gds.save_safetensors needs PyTorch: pip install torch "
                          "(or pip install 's3gds[torch]')") from e

    start = time.perf_counter()
    path = os.fspath(path)
    _landing.check_method(method)
    stats = SaveStats(path=path)
    outs = _save_entries(tensors, stats)
    header = _save_header(outs, metadata)
    stats.header_bytes = len(header)
    stats.data_bytes = sum(o.nbytes for o in outs)
    stats.bytes = stats.header_bytes + stats.data_bytes

    reasons: Dict[str, str] = {}
    for o in outs:
        choice = _landing.choose(path, o.tensor.device, method)
        o.method, o.kind = choice.method, choice.kind
        reasons.setdefault(choice.method, choice.reason)
        stats.methods[o.name] = choice.method
    used = {o.method for o in outs if o.nbytes}
    stats.method = "mixed" if len(used) > 1 else (used.pop() if used else "posix")
    stats.reason = reasons.get("ioctl") or reasons.get("posix") or "no tensor bytes to write"

    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        stats.posix_calls += _write_all(fd, header)
        _save_data(fd, path, outs, stats)
    except BaseException:
        # Closing uploads what was written: remove the file so that no partial
        # checkpoint stays behind.
        discard(fd, path)
        raise
    try:
        os.close(fd)  # on a mount the upload ends here: a failed one raises EIO
    except OSError:
        try:
            os.unlink(path)
        except OSError:
            pass
        raise
    stats.seconds = time.perf_counter() - start
    log.info("s3gds.save_safetensors %s: %d tensors, %d bytes (%d by ioctl, %d by write) in %.3f s (%s)",
             path, len(outs), stats.bytes, stats.ioctl_bytes, stats.posix_bytes, stats.seconds, stats.reason)
    return stats


def _save_entries(tensors: Any, stats: SaveStats) -> List[_Out]:
    import torch

    if not isinstance(tensors, dict):
        raise TypeError(f"tensors must be a dict of names to tensors, not {type(tensors).__name__}")
    names = {getattr(torch, attr): name for name, (attr, _) in DTYPES.items() if hasattr(torch, attr)}
    outs = []
    for name, t in tensors.items():
        if not isinstance(name, str):
            raise TypeError(f"tensor names must be strings, not {type(name).__name__} ({name!r})")
        if name == "__metadata__":
            raise ValueError("a tensor may not be named '__metadata__': the header keeps that name "
                             "for the metadata")
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"tensor {name!r}: a {type(t).__name__}, not a torch.Tensor")
        if t.layout != torch.strided:
            raise ValueError(f"tensor {name!r}: layout {t.layout} is not dense; safetensors holds "
                             "dense tensors only (.to_dense() first)")
        if t.device.type == "meta":
            raise ValueError(f"tensor {name!r} is on the meta device: it has no bytes to write")
        if t.dtype not in names:
            raise ValueError(f"tensor {name!r}: dtype {t.dtype} has no safetensors name here "
                             f"(known: {', '.join(DTYPES)})")
        t = t.detach()
        if not t.is_contiguous():
            t = t.contiguous()
            stats.copied.append(name)
        outs.append(_Out(name, t, names[t.dtype], t.numel() * t.element_size()))
    _refuse_shared(tensors)
    rank = {d: i for i, d in enumerate(_SAVE_ORDER)}
    outs.sort(key=lambda o: (rank[o.dtype], o.name))
    return outs


def _refuse_shared(tensors: Dict[str, "torch.Tensor"]) -> None:
    # As safetensors: tensors whose bytes overlap in one storage would be
    # written twice and come back as separate tensors.
    groups: Dict[Tuple[Any, int], List[Tuple[int, int, str]]] = {}
    for name, t in tensors.items():
        storage = t.untyped_storage()
        if storage.data_ptr() == 0 or storage.nbytes() == 0 or t.numel() == 0:
            continue
        begin = t.data_ptr()
        # The last byte the tensor reaches, whatever its strides.
        end = begin + sum((s - 1) * st for s, st in zip(t.shape, t.stride())) * t.element_size() + t.element_size()
        groups.setdefault((t.device, storage.data_ptr()), []).append((begin, end, name))
    for areas in groups.values():
        areas.sort()
        reach, last = areas[0][1], areas[0][2]
        for begin, end, name in areas[1:]:
            if begin < reach:
                raise ValueError(f"tensors {last!r} and {name!r} share memory: safetensors files hold each "
                                 "tensor's bytes once; save one of them, or a .clone() of the other")
            if end > reach:
                reach, last = end, name


def _save_header(outs: List[_Out], metadata: Optional[Dict[str, str]]) -> bytes:
    header: Dict[str, Any] = {}
    if metadata is not None:
        if not isinstance(metadata, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
            raise TypeError("metadata must map strings to strings")
        header["__metadata__"] = metadata
    offset = 0
    for o in outs:
        header[o.name] = {"dtype": o.dtype, "shape": list(o.tensor.shape), "data_offsets": [offset, offset + o.nbytes]}
        offset += o.nbytes
    raw = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw


def _save_data(fd: int, path: str, outs: List[_Out], stats: SaveStats) -> None:
    run: List[_Out] = []
    host: List[Any] = []  # the HostBuffer the host stand-in's runs go through, reused

    def flush():
        if run:
            _write_ioctl_run(fd, path, run, host, stats)
            run.clear()

    try:
        for o in outs:
            if o.nbytes == 0:
                continue
            if o.method == "ioctl":
                if run and (o.nbytes >= SAVE_DIRECT or run[0].kind != o.kind
                            or o.tensor.device != run[0].tensor.device
                            or sum(r.nbytes for r in run) + o.nbytes > SAVE_BATCH):
                    flush()
                run.append(o)
                if o.nbytes >= SAVE_DIRECT:
                    flush()
                continue
            flush()
            stats.posix_calls += _write_tensor_posix(fd, o.tensor)
            stats.posix_bytes += o.nbytes
        flush()
    finally:
        for h in host:
            try:
                h.close()
            except BufferError:
                pass  # a view still holds the mapping: it goes when the view does


def _write_ioctl_run(fd: int, path: str, run: List[_Out], host: List[Any], stats: SaveStats) -> None:
    """One S3GDS_IOC_WRITE for the run: a lone tensor from its own memory, several from one buffer."""
    import torch

    from . import write_from
    from ._hostbuffer import HostBuffer

    total = sum(o.nbytes for o in run)
    if run[0].kind == "host-standin":
        if not host or host[0].nbytes < total:
            for h in host:
                h.close()
            host[:] = [HostBuffer(total)]
        staging = torch.frombuffer(host[0].view(), dtype=torch.uint8)
        at = 0
        for o in run:
            staging[at:at + o.nbytes].copy_(_bytes_of(o.tensor))
            at += o.nbytes
        del staging  # the mapping's export goes with it, so that close() can unmap
        src: Any = host[0]
    elif len(run) == 1:
        src = _bytes_of(run[0].tensor)
    else:
        src = torch.cat([_bytes_of(o.tensor) for o in run])
    res = write_from(src, fd, total)
    if res.nbytes != total:
        raise OSError(errno.EIO, f"S3GDS_IOC_WRITE took {res.nbytes} of {total} bytes", path)
    stats.ioctl_calls += 1
    stats.ioctl_bytes += total
    stats.daemon_seconds += res.seconds


def _bytes_of(t: "torch.Tensor") -> "torch.Tensor":
    """A contiguous tensor's bytes as a flat uint8 tensor on its device (no copy)."""
    import torch

    return t.reshape(-1).view(torch.uint8)


def _write_tensor_posix(fd: int, t: "torch.Tensor") -> int:
    flat = _bytes_of(t)
    if flat.device.type == "cpu":
        return _write_all(fd, memoryview(flat.numpy()))
    calls = 0
    for at in range(0, flat.numel(), _POSIX_CHUNK):
        calls += _write_all(fd, memoryview(flat[at:at + _POSIX_CHUNK].cpu().numpy()))
    return calls


def _write_all(fd: int, data: Any) -> int:
    """write(2) until every byte is taken; returns the number of calls."""
    view = memoryview(data).cast("B")
    calls, done = 0, 0
    while done < len(view):
        done += os.write(fd, view[done:])
        calls += 1
    return calls
