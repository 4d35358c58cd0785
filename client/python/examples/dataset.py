"""Read every file of an s3gdsfs directory into GPU memory, one reused buffer per worker.

    python3 dataset.py /mnt/s3/bucket/shards

Each item is (name, tensor): a uint8 CUDA view of the file's bytes inside a
buffer allocated once per worker process and sized for the largest file. The
view is valid until the next item is read into the same buffer: consume it
(decode, copy into a batch) before asking for the next one, or pass copy=True.

One buffer per process keeps the daemon's CUDA IPC import cache hitting on
every read. Run one process per GPU (DDP, with rank and world_size); within it,
num_workers=0 is enough, since the daemon does the transfers and shares the
link among processes. With num_workers > 0 (CUDA in workers needs the "spawn"
start method) pass copy=True: items reach the main process through CUDA IPC,
while the worker already reads the next file into its buffer.
"""

import argparse
import collections
import os
import sys
import time

import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import s3gds  # noqa: E402


class DirectoryDataset(IterableDataset):
    def __init__(self, root, device=None, flags=0, copy=False, rank=0, world_size=1):
        self.root = root
        self.device = torch.device(device if device is not None else "cuda")
        self.flags = flags
        self.copy = copy
        # Listing is a metadata call to the daemon: do it once, here.
        entries = sorted((e for e in os.scandir(root) if e.is_file()), key=lambda e: e.name)
        self.files = [(e.name, e.stat().st_size) for e in entries][rank::world_size]
        self.transports = collections.Counter()  # per process; see s3gds.stats() for the daemon's view

    def __iter__(self):
        worker = get_worker_info()
        files = self.files if worker is None else self.files[worker.id::worker.num_workers]
        if not files:
            return
        buffer = torch.empty(max(size for _, size in files), dtype=torch.uint8, device=self.device)
        for name, size in files:
            path = os.path.join(self.root, name)
            res = s3gds.read_into(buffer, path, length=size, flags=self.flags)
            if res.nbytes != size:
                raise IOError(f"{path}: read {res.nbytes} of {size} bytes; did the object change?")
            self.transports[(res.transport, res.decline_reason)] += 1
            data = buffer[:size]
            yield name, data.clone() if self.copy else data


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", help="a directory of an s3gdsfs mount")
    parser.add_argument("--http-only", action="store_true", help="never try RDMA")
    args = parser.parse_args()

    dataset = DirectoryDataset(args.root, flags=s3gds.FLAG_HTTP_ONLY if args.http_only else 0)
    # batch_size=None: items come one by one, as views of the reused buffer.
    loader = DataLoader(dataset, batch_size=None, num_workers=0)
    total, start = 0, time.perf_counter()
    checksum = torch.zeros((), dtype=torch.int64, device=dataset.device)
    for name, data in loader:
        checksum += data.sum(dtype=torch.int64)  # runs on the GPU before the buffer is reused
        total += data.numel()
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    print(f"{len(dataset.files)} files, {total / 1e9:.3f} GB in {seconds:.2f} s, "
          f"{total / 1e9 / seconds:.2f} GB/s, checksum {checksum.item()}")
    for (transport, decline), count in sorted(dataset.transports.items(), key=str):
        print(f"  {count} reads over {transport}" + (f", RDMA declined: {decline}" if decline else ""))


if __name__ == "__main__":
    main()
