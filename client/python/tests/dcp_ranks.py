"""One rank of test_dcp.py's two-rank distributed checkpoint (gloo, CPU tensors).

    python tests/dcp_ranks.py RANK WORLD STORE CKPT STOCK_CKPT OUT

Saves a state dict (replicated tensors, a DTensor sharded by rows, tensors of
this rank alone, a non-contiguous one, non-tensor values) with
S3GDSStorageWriter into CKPT and with FileSystemWriter into STOCK_CKPT, loads
each back with S3GDSStorageReader and FileSystemReader into fresh state dicts,
compares every tensor byte for byte, and writes what it did as JSON to OUT.
Exits non-zero, saying why, on a difference.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.distributed.checkpoint as dcp  # noqa: E402
from torch.distributed.device_mesh import init_device_mesh  # noqa: E402
from torch.distributed.tensor import DTensor, Shard, distribute_tensor  # noqa: E402

from s3gds.dcp import S3GDSStorageReader, S3GDSStorageWriter  # noqa: E402

SHARDED_SHAPE = (101, 33)  # rows split 51 + 50


def full_tensors():
    """The tensors every rank can make: the same seed gives the same values."""
    g = torch.Generator().manual_seed(11)
    return {
        "model.embed.weight": torch.randn(1600, 1024, generator=g),  # 6.25 MiB: a multipart upload
        "model.sharded.weight": torch.randn(*SHARDED_SHAPE, generator=g),
        "model.norm.bias": torch.randn(77, generator=g).to(torch.bfloat16),
        "model.codes": torch.randint(-128, 127, (3, 5, 7), generator=g, dtype=torch.int8),
        "model.transposed": torch.randn(40, 24, generator=g).t(),  # not contiguous
        "model.empty": torch.empty(0, 8),
        "step": torch.tensor(1234, dtype=torch.int64),
    }


def state_dict(rank, mesh, fill=None):
    """The state dict of this rank; fill=0 gives one of the same structure, zeroed."""
    t = full_tensors()
    sd = {}
    for name, v in t.items():
        if name == "model.sharded.weight":
            v = distribute_tensor(v, mesh, [Shard(0)])
        sd[name] = v
    g = torch.Generator().manual_seed(100 + rank)
    sd[f"rank{rank}.buffer"] = torch.randn(rank * 10 + 5, 3, generator=g)
    # Equal names are one replicated value to DCP, saved once: what differs by rank is named by it.
    sd["extra"] = {"lr": 0.25, "milestones": [10, 20]}
    sd[f"rank{rank}.note"] = f"s3gds rank {rank}"
    if fill is not None:
        sd = {k: _zeroed(v) for k, v in sd.items()}
    return sd


def _zeroed(v):
    if isinstance(v, DTensor):
        return DTensor.from_local(torch.zeros_like(v.to_local()), v.device_mesh, v.placements,
                                  shape=v.shape, stride=v.stride())
    if isinstance(v, torch.Tensor):
        return torch.zeros_like(v)
    if isinstance(v, dict):
        return {k: _zeroed(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_zeroed(x) for x in v]
    return type(v)()  # 0, 0.0, "": the load puts back what was saved


def as_bytes(v):
    if isinstance(v, DTensor):
        v = v.to_local()
    return v.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def compare(what, got, want):
    for name, w in want.items():
        g = got[name]
        if isinstance(w, torch.Tensor):
            if g.dtype != w.dtype or tuple(g.shape) != tuple(w.shape):
                sys.exit(f"{what}: {name}: {g.dtype} {tuple(g.shape)}, saved {w.dtype} {tuple(w.shape)}")
            if as_bytes(g) != as_bytes(w):
                sys.exit(f"{what}: {name}: the bytes differ from those saved")
        elif g != w:
            sys.exit(f"{what}: {name}: {g!r}, saved {w!r}")


def stats(s):
    return {"ioctl_bytes": s.ioctl_bytes, "ioctl_items": s.ioctl_items,
            "posix_bytes": s.posix_bytes, "posix_items": s.posix_items, "reasons": s.reasons}


def main():
    rank, world, store, ckpt, stock_ckpt, out = sys.argv[1:]
    rank, world = int(rank), int(world)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    mesh = init_device_mesh("cpu", (world,))
    saved = state_dict(rank, mesh)

    writer = S3GDSStorageWriter(ckpt)
    dcp.save(saved, storage_writer=writer)
    dcp.save(saved, storage_writer=dcp.FileSystemWriter(stock_ckpt))
    dist.barrier()

    result = {"rank": rank, "writer": stats(writer.stats), "readers": {}}
    for where, path in (("s3gds", ckpt), ("stock", stock_ckpt)):
        for how in ("s3gds", "stock"):
            back = state_dict(rank, mesh, fill=0)
            reader = S3GDSStorageReader(path) if how == "s3gds" else dcp.FileSystemReader(path)
            dcp.load(back, storage_reader=reader)
            compare(f"written by {where}, read by {how}", back, saved)
            if how == "s3gds":
                result["readers"][where] = stats(reader.stats)
    dist.barrier()
    dist.destroy_process_group()
    with open(out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
