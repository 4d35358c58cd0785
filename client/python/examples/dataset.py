"""Train a small model on the files under a prefix of an s3gdsfs mount, the bytes landing in device memory.

    python3 dataset.py /mnt/s3/bucket/shards/ --device cuda --epochs 3 --workers 0

Each file is an item of an S3GDSIterableDataset, sharded by rank (torchrun's
RANK and WORLD_SIZE) and by DataLoader worker. The transform lands the whole
object as a uint8 tensor on the device through S3GDS_IOC_READ (item.to_tensor;
read(2) where the mount cannot take the GPU path). The "model" learns to
predict the mean of each 64-byte record of the files from its bytes: a real
optimisation over whatever the files hold, to show the loop, not a task.

On a GPU, run one process per GPU, num_workers=0: the daemon does the
transfers and shares the link among processes; CUDA in workers needs the
"spawn" start method. On a mount whose daemon runs the host stand-in (tests),
--device cpu takes the GPU path into host buffers.

--check reads each file again with read(2) and compares sha256 digests.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import os
import sys
import time

import torch
from torch.utils.data import DataLoader

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from s3gds.datasets import S3GDSItem, S3GDSIterableDataset  # noqa: E402

RECORD = 64


class Land:
    """The transform: (key, uint8 tensor on device, how it got there, digest or None)."""

    def __init__(self, device: str, check: bool):
        self.device, self.check = device, check

    def __call__(self, item: S3GDSItem):
        data = item.to_tensor(self.device)
        digest = None
        if self.check:
            posix = hashlib.sha256(item.read()).hexdigest()
            landed = hashlib.sha256(data.cpu().numpy().tobytes()).hexdigest()
            if posix != landed:
                raise ValueError(f"{item.key}: the landed bytes differ from read(2)'s")
            digest = landed
        return item.key, data, item.method, digest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("prefix", help="a directory or key prefix on an s3gdsfs mount")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--workers", type=int, default=0, help="DataLoader workers")
    parser.add_argument("--check", action="store_true", help="compare every file's bytes with read(2)'s")
    args = parser.parse_args()

    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    dataset = S3GDSIterableDataset.from_prefix(args.prefix, transform=Land(args.device, args.check),
                                               rank=rank, world_size=world)
    loader = DataLoader(dataset, batch_size=None, num_workers=args.workers,
                        multiprocessing_context="spawn" if args.workers and args.device != "cpu" else None)

    torch.manual_seed(0)
    model = torch.nn.Linear(RECORD, 1).to(args.device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for epoch in range(1, args.epochs + 1):
        files = nbytes = checked = 0
        methods: collections.Counter = collections.Counter()
        losses = []
        start = time.perf_counter()
        for key, data, method, digest in loader:
            files, nbytes = files + 1, nbytes + data.numel()
            methods[method] += 1
            checked += digest is not None
            records = data[: data.numel() // RECORD * RECORD].view(-1, RECORD).float() / 255
            if not len(records):
                continue
            target = records.mean(dim=1, keepdim=True)
            loss = torch.nn.functional.mse_loss(model(records), target)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        seconds = time.perf_counter() - start
        how = ", ".join(f"{n} through {m}" for m, n in sorted(methods.items()))
        print(f"epoch {epoch}: {files} files, {nbytes} bytes in {seconds:.2f} s ({how}); "
              f"loss {losses[0] if losses else float('nan'):.4f} -> {losses[-1] if losses else float('nan'):.4f}"
              + (f"; sha256 checked for {checked} files" if args.check else ""))


if __name__ == "__main__":
    main()
