"""The CUDA IPC handle and offset of a torch CUDA tensor's memory.

PyTorch's ``untyped_storage()._share_cuda_()`` returns (device, handle,
storage_size_bytes, storage_offset_bytes, ref_counter_handle,
ref_counter_offset, event_handle, event_sync_required). For memory from the
default caching allocator the handle is 66 bytes: 2 (format version), b"c",
then the 64-byte CUDA IPC handle of the cudaMalloc block's base; the storage
starts storage_offset_bytes into that block.

Each _share_cuda_() call also wraps the storage's memory in a new
reference-counted context and sets a counter that a consumer process is meant
to release. The daemon is not a torch process, so this module releases the
counter itself (otherwise the block would never return to the allocator) and
shares each storage once, reusing the answer while the storage lives.
"""

import errno
import threading
import warnings
from collections import namedtuple

from . import _abi

Destination = namedtuple("Destination", "device ipc_handle dst_offset capacity synchronize")

_HANDLE_FORMAT_VERSION = 2
_HANDLE_LEN = 2 + _abi.IPC_HANDLE_LEN

EXPANDABLE_SEGMENTS_MESSAGE = (
    "this tensor's memory comes from an expandable segment "
    "(PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True), which a CUDA IPC handle cannot name; "
    "start the process with expandable_segments:False in PYTORCH_CUDA_ALLOC_CONF "
    "(or without expandable_segments in it) and allocate the destination again"
)
CUDA_MALLOC_ASYNC_MESSAGE = (
    "memory from PyTorch's cudaMallocAsync allocator (PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync) "
    "cannot be shared through CUDA IPC handles; run with the native allocator "
    "(backend:native, the default) to read into CUDA tensors"
)


def cuda_destination(tensor):
    """Where the daemon must write for ``tensor``: a contiguous CUDA tensor."""
    import torch

    device = getattr(tensor, "device", None)
    if getattr(device, "type", None) != "cuda":
        raise TypeError(f"dst must be a CUDA tensor or a HostBuffer, not a tensor on {device}")
    if not tensor.is_contiguous():
        raise ValueError("dst must be contiguous: the daemon writes one run of bytes")
    if torch.cuda.get_allocator_backend() == "cudaMallocAsync":
        raise RuntimeError(CUDA_MALLOC_ASYNC_MESSAGE)

    storage = tensor.untyped_storage()
    ipc_handle, storage_offset = _shared_handle(storage)
    element_size = tensor.element_size()
    return Destination(
        device=device.index,
        ipc_handle=ipc_handle,
        dst_offset=storage_offset + tensor.storage_offset() * element_size,
        capacity=tensor.numel() * element_size,
        synchronize=torch.cuda.current_stream(device).synchronize,
    )


def parse_share_cuda(shared):
    """(ipc_handle, storage_offset_bytes) from a _share_cuda_() tuple."""
    handle = bytes(shared[1] or b"")
    if len(handle) >= 2 and handle[1] == ord("e"):
        raise RuntimeError(EXPANDABLE_SEGMENTS_MESSAGE)
    if len(handle) != _HANDLE_LEN or handle[0] != _HANDLE_FORMAT_VERSION or handle[1] != ord("c"):
        raise RuntimeError(
            f"unknown PyTorch CUDA IPC handle format (starts {handle[:2]!r}, {len(handle)} bytes); "
            "s3gds knows version 2 'c' handles of 66 bytes")
    return handle[2:], int(shared[3])


# storage._cdata -> (weak reference, data_ptr, nbytes, ipc_handle, storage_offset)
_shares = {}
_shares_lock = threading.Lock()
_warned_counter = False


def _shared_handle(storage):
    key = storage._cdata
    with _shares_lock:
        entry = _shares.get(key)
        if entry and not entry[0].expired() and entry[1:3] == (storage.data_ptr(), storage.nbytes()):
            return entry[3], entry[4]

    try:
        shared = storage._share_cuda_()
    except RuntimeError as e:
        # The cudaMallocAsync backend refuses here ("does not yet support shareIpcHandle").
        raise RuntimeError(f"PyTorch could not share this tensor's memory ({e}); "
                           f"note that {CUDA_MALLOC_ASYNC_MESSAGE}") from e
    ipc_handle, storage_offset = parse_share_cuda(shared)
    _release_counter(shared)

    weak = _weak_ref(storage)
    if weak is not None:
        with _shares_lock:
            if len(_shares) >= 64:
                for k in [k for k, e in _shares.items() if e[0].expired()]:
                    del _shares[k]
            _shares[key] = (weak, storage.data_ptr(), storage.nbytes(), ipc_handle, storage_offset)
    return ipc_handle, storage_offset


def _release_counter(shared):
    global _warned_counter
    import torch

    try:
        torch.UntypedStorage._release_ipc_counter_cuda(shared[4], shared[5])
    except (AttributeError, RuntimeError, TypeError) as e:
        if not _warned_counter:
            _warned_counter = True
            warnings.warn(f"s3gds: could not release PyTorch's IPC reference counter ({e}); "
                          "memory shared with the daemon may not return to the allocator",
                          RuntimeWarning, stacklevel=4)


def _weak_ref(storage):
    try:
        from torch.multiprocessing.reductions import StorageWeakRef
    except ImportError:
        return None
    return StorageWeakRef(storage)


def parse_pci_bus_id(text):
    """(domain, bus, device) of a PCI address as CUDA spells it ("0000:1B:00.0"), or None."""
    try:
        domain, bus, rest = text.split(":")
        device = rest.split(".")[0]
        return int(domain, 16), int(bus, 16), int(device, 16)
    except (AttributeError, ValueError):
        return None


def daemon_ordinal(index, caps_devices, local_pci=None):
    """The daemon's ordinal of this process's ``cuda:index``.

    A process numbers the GPUs it sees from 0 (CUDA_VISIBLE_DEVICES, or a container given
    some of the node's GPUs), the daemon numbers all of them: the two are matched by PCI
    address (caps' ``pci_bus_id``). Without addresses on either side (the host stand-in, a
    daemon that lists none) the ordinal is taken as it is. ``local_pci`` is this process's
    (domain, bus, device) for the device; by default torch's properties of it.
    """
    addressed = [(parse_pci_bus_id(d.get("pci_bus_id")), d.get("ordinal")) for d in caps_devices or ()]
    addressed = [(pci, ordinal) for pci, ordinal in addressed if pci is not None]
    if not addressed:
        return index
    if local_pci is None:
        import torch

        props = torch.cuda.get_device_properties(index)
        if not hasattr(props, "pci_bus_id"):
            return index
        local_pci = (props.pci_domain_id, props.pci_bus_id, props.pci_device_id)
    for pci, ordinal in addressed:
        if pci == tuple(local_pci):
            return ordinal
    seen = ", ".join(f"{o}: {d:04x}:{b:02x}:{v:02x}" for (d, b, v), o in addressed)
    raise OSError(errno.ENODEV, f"cuda:{index} (PCI {local_pci[0]:04x}:{local_pci[1]:02x}:{local_pci[2]:02x}) "
                  f"is not a device the s3gdsfs daemon sees ({seen}): the daemon must see every GPU its "
                  "callers use (docs/ioctl.md, 'Devices')")
