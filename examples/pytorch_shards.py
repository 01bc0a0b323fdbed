#!/usr/bin/env python3
"""A map-style PyTorch Dataset over the shards in a bucket, read through a shoal cache group.

    python3 examples/pytorch_shards.py --storage s3://bucket --prefix shards/ \\
        --meta redis://10.0.0.1:6379/1 --cache-group train --endpoint http://10.0.0.2:9000 \\
        --workers 4

Every item is one whole shard as a uint8 tensor, read with Client.readinto straight into the
tensor's memory. The client is opened once, in the main process (it lists the shards there);
DataLoader workers are forked from it and each starts its own connections to the group on its
first read — nothing to do in a worker_init_fn. A real pipeline would decode the shard in
__getitem__ (tar, records, tokens); this one returns it with its SHA-256 so that a run can be
checked against the store: one line "sha256 size key" per shard, then a summary on stderr.

Use PYTHONPATH=python (a checkout with libshoal built in build/) or `pip install ./python`.
"""
import argparse
import hashlib
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset

import shoal


class ShardDataset(Dataset):
    """The objects under PREFIX (ending in SUFFIX) of STORAGE, one item per object."""

    def __init__(self, storage, prefix="", suffix="", **settings):
        self.client = shoal.Client(storage, **settings)
        entries = [e for e in self.client.list(prefix, recursive=True)
                   if not e.is_prefix and e.key.endswith(suffix)]
        self.keys = [e.key for e in entries]
        self.sizes = [e.size for e in entries]

    def __len__(self):
        return len(self.keys)

    def __getitem__(self, i):
        key, size = self.keys[i], self.sizes[i]
        shard = torch.empty(size, dtype=torch.uint8)
        n = self.client.readinto(key, 0, shard.numpy())  # no copy beyond the read buffers
        if n != size:
            raise OSError("%s: read %d of %d bytes (the object changed?)" % (key, n, size))
        return key, hashlib.sha256(shard.numpy()).hexdigest(), shard


class PlannedShards:
    """The same items through shoal.torch (--plan): each DataLoader worker plans the shards it
    will be given, so that its reads find them in memory (docs/python.md, "Access plans")."""

    @staticmethod
    def make(shards, window=None):
        import shoal.torch

        class Planned(shoal.torch.PlanDataset):
            def __getitem__(self, i):
                shard = super().__getitem__(i)
                key = self.item(i)[0]
                return key, hashlib.sha256(shard.numpy()).hexdigest(), shard
        return Planned(shards.client, shards.keys, sizes=shards.sizes, window=window)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--storage", required=True, help="file:///dir or s3://bucket[/prefix]")
    ap.add_argument("--prefix", default="", help="shards are the objects under this prefix")
    ap.add_argument("--suffix", default="", help="... whose keys end with this")
    ap.add_argument("--meta", help="registry of the cache group (as shoal --meta)")
    ap.add_argument("--cache-group", help="the cache group to read through")
    ap.add_argument("--endpoint", help="S3 endpoint")
    ap.add_argument("--block-size", help="the group's block size (as shoal --block-size)")
    ap.add_argument("--use-iorpc", action="store_true", help="read from members over IORPC")
    ap.add_argument("--workers", type=int, default=4, help="DataLoader worker processes")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--plan", action="store_true",
                    help="read through shoal.torch: each worker plans the shards it is given")
    args = ap.parse_args()

    ds = ShardDataset(args.storage, args.prefix, args.suffix, meta=args.meta,
                      cache_group=args.cache_group, endpoint=args.endpoint,
                      block_size=args.block_size, use_iorpc=args.use_iorpc or None)
    # batch_size=None: items are not collated (shards differ in size).
    if args.plan:
        import shoal.torch
        ds = PlannedShards.make(ds)
        loader = shoal.torch.loader(ds, batch_size=None, shuffle=True, num_workers=args.workers)
    else:
        loader = DataLoader(ds, batch_size=None, shuffle=True, num_workers=args.workers)
    total, start = 0, time.monotonic()
    for epoch in range(args.epochs):
        if args.plan:
            loader.sampler.set_epoch(epoch)
        for key, digest, shard in loader:
            print(digest, shard.numel(), key)
            total += shard.numel()
    secs = time.monotonic() - start
    print("pytorch_shards: %d shards x %d epochs, %.1f MiB in %.2f s (%.0f MiB/s) with %d "
          "workers" % (len(ds), args.epochs, total / 2**20, secs, total / 2**20 / max(secs, 1e-9),
                       args.workers), file=sys.stderr)


if __name__ == "__main__":
    main()
