"""PyTorch datasets whose sampler order becomes each DataLoader worker's access plan.

    import shoal, shoal.torch
    client = shoal.Client("s3://bucket", meta=..., cache_group="train")
    ds = shoal.torch.PlanDataset(client, keys, record_size=1 << 20)   # or one item per key
    loader = shoal.torch.loader(ds, batch_size=32, shuffle=True, seed=0, num_workers=4)
    for epoch in range(10):
        loader.sampler.set_epoch(epoch)
        for batch in loader:          # uint8 tensors of shape (32, 1 << 20)
            ...

The sampler (PlanSampler) draws one permutation per epoch from (seed, epoch). DataLoader hands
batch k of it to worker k % num_workers (its in-order round robin), so every worker knows the
exact indices it will be given and plans them (Client.plan): its reads are then served from
memory as the plan fetches ahead. Use it with the default persistent_workers=False (workers are
forked for each epoch and see set_epoch); with persistent workers, or a DataLoader set up
differently from the sampler, reads stay exact but fall off the plan. See docs/python.md.
"""

import bisect
import functools
import os

import torch
import torch.utils.data as tud

__all__ = ["PlanDataset", "PlanSampler", "loader", "worker_init_fn"]


class PlanDataset(tud.Dataset):
    """A map-style dataset over the objects KEYS of CLIENT: with record_size, fixed-size
    records (the last of an object may be shorter), else one item per object (a shard). Items
    are uint8 tensors (TRANSFORM applied when given). SIZES: the objects' sizes, stat'ed when
    not given. window, inflight: the plans' (Client.plan)."""

    def __init__(self, client, keys, record_size=None, sizes=None, window=None, inflight=None,
                 transform=None):
        self.client = client
        self.keys = list(keys)
        self.sizes = list(sizes) if sizes is not None else [client.stat(k).size
                                                            for k in self.keys]
        if len(self.sizes) != len(self.keys):
            raise ValueError("one size per key")
        if record_size is not None and record_size <= 0:
            raise ValueError("record_size must be positive")
        self.record_size = record_size
        self.window, self.inflight, self.transform = window, inflight, transform
        counts = [(s + record_size - 1) // record_size if record_size else 1 for s in self.sizes]
        self._starts = [0]
        for n in counts:
            self._starts.append(self._starts[-1] + n)
        self.sampler = None  # set by PlanSampler
        self._plan = None
        self._plan_tag = None

    def __len__(self):
        return self._starts[-1]

    def item(self, i):
        """(key, offset, length) of item I."""
        if not 0 <= i < len(self):
            raise IndexError(i)
        k = bisect.bisect_right(self._starts, i) - 1
        if self.record_size is None:
            return self.keys[k], 0, self.sizes[k]
        off = (i - self._starts[k]) * self.record_size
        return self.keys[k], off, min(self.record_size, self.sizes[k] - off)

    def plan(self):
        """This process's plan for the current epoch (made on first use; None without a
        PlanSampler)."""
        s = self.sampler
        if s is None:
            return None
        info = tud.get_worker_info()
        wid, nw = (info.id, info.num_workers) if info else (0, 1)
        tag = (os.getpid(), s.epoch, wid, nw)
        if self._plan_tag != tag:
            if self._plan is not None and self._plan_tag[0] == os.getpid():
                self._plan.close()
            self._plan = None  # a parent's plan is not ours to close (shoal.Plan knows)
            self._plan = self.client.plan((self.item(i) for i in s.worker_indices(wid, nw)),
                                          window=self.window, inflight=self.inflight)
            self._plan_tag = tag
        return self._plan

    def __getitem__(self, i):
        key, off, length = self.item(i)
        t = torch.empty(length, dtype=torch.uint8)
        plan = self.plan()
        buf = t.numpy()
        n = plan.readinto(key, off, buf) if plan else self.client.readinto(key, off, buf)
        if n != length:
            raise OSError("%s: read %d of %d bytes at %d (the object changed?)"
                          % (key, n, length, off))
        return self.transform(t) if self.transform else t

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_plan"] = state["_plan_tag"] = None  # a plan stays in its process
        return state


class PlanSampler(tud.Sampler):
    """A permutation of DATASET (a PlanDataset) per epoch (shuffle=False: in order), which the
    dataset's workers plan. batch_size and drop_last must be the DataLoader's (loader() passes
    them)."""

    def __init__(self, dataset, shuffle=True, seed=0, batch_size=None, drop_last=False):
        self.dataset, self.shuffle, self.seed = dataset, shuffle, seed
        self.batch_size, self.drop_last = batch_size, drop_last
        self.epoch = 0
        dataset.sampler = self

    def set_epoch(self, epoch):
        """Call before iterating the loader for each epoch: a new permutation, new plans."""
        self.epoch = epoch

    def order(self):
        """The epoch's order: a range, or an int64 tensor (8 bytes an item, not a list)."""
        n = len(self.dataset)
        if not self.shuffle:
            return range(n)
        g = torch.Generator()
        g.manual_seed(self.seed * 1000003 + self.epoch)
        return torch.randperm(n, generator=g)

    def __iter__(self):
        order = self.order()
        for i in range(0, len(order), 65536):
            yield from _ints(order[i:i + 65536])

    def __len__(self):
        return len(self.dataset)

    def worker_indices(self, worker, num_workers):
        """The indices worker WORKER of NUM_WORKERS is given this epoch, in order: batch k of
        the order goes to worker k % num_workers."""
        order = self.order()
        b = self.batch_size or 1
        nbatch = len(order) // b if self.drop_last else (len(order) + b - 1) // b
        for k in range(worker, nbatch, num_workers):
            yield from _ints(order[k * b:(k + 1) * b])


def _ints(part):
    return part.tolist() if isinstance(part, torch.Tensor) else part


def worker_init_fn(worker_id):
    """Starts the worker's plan before its first index arrives (loader() installs it)."""
    info = tud.get_worker_info()
    ds = info.dataset if info else None
    if isinstance(ds, PlanDataset):
        ds.plan()


def loader(dataset, batch_size=None, shuffle=True, seed=0, drop_last=False, **kwargs):
    """A DataLoader over DATASET with a PlanSampler of the same batch_size and drop_last."""
    if kwargs.get("persistent_workers"):
        raise ValueError("plans need workers that see set_epoch: persistent_workers=False")
    sampler = PlanSampler(dataset, shuffle=shuffle, seed=seed, batch_size=batch_size,
                          drop_last=drop_last)
    init = functools.partial(_init_both, kwargs.pop("worker_init_fn", None))
    return tud.DataLoader(dataset, batch_size=batch_size, sampler=sampler, drop_last=drop_last,
                          worker_init_fn=init, **kwargs)


def _init_both(user_init, worker_id):
    worker_init_fn(worker_id)
    if user_init:
        user_init(worker_id)
