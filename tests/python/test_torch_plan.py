"""shoal.torch: a DataLoader with 4 forked workers over a PlanDataset of fixed-size records,
through a 2-member group, reads 2 shuffled epochs exact, each worker planning exactly the
indices it is given (no read off its plan), and in the second (warm) epoch at least 95 % of the
reads find their record already in memory (plan hits)."""
import os
import random
import re

import pytest
import torch

import shoal
import shoal.torch as st

# 4 workers on a 2-core machine is the point here.
pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create")

RECORD = 32 * 1024
PER_OBJECT = 32  # records of one object (1 MiB)


class Probe(st.PlanDataset):
    """Each item with what the worker's plan did so far."""

    def __getitem__(self, i):
        t = super().__getitem__(i)
        s = self.plan().stats()
        info = torch.utils.data.get_worker_info()
        return (i, t, info.id, s["hits"], s["misses"], s["offplan"])


def test_dataloader_4_workers_2_epochs(harness, tmp_path):
    root = str(tmp_path / "store")
    os.makedirs(os.path.join(root, "rec"))
    rnd = random.Random(31)
    objs = {}
    for n in range(16):
        key = "rec/%02d.bin" % n
        objs[key] = rnd.randbytes(PER_OBJECT * RECORD)
        with open(os.path.join(root, key), "wb") as f:
            f.write(objs[key])
    storage = "file://" + root
    meta = "sqlite3://%s/meta.db" % harness.tmp
    for m in ("a", "b"):
        harness.member(m, storage, "--meta", meta, "--cache-group", "g", "--block-size", "256K")
    harness.wait_members(meta, "g", 2)
    keys = sorted(objs)
    with shoal.Client(storage, meta=meta, cache_group="g", block_size="256K",
                      buffer_size="16M") as c:
        ds = Probe(c, keys, record_size=RECORD, window=8 << 20)
        assert len(ds) == 16 * PER_OBJECT
        loader = st.loader(ds, batch_size=None, shuffle=True, seed=7, num_workers=4)
        orders = []
        for epoch in range(2):
            loader.sampler.set_epoch(epoch)
            seen = []
            last = {}
            for i, t, wid, hits, misses, offplan in loader:
                key, off, length = ds.item(i)
                assert t.numpy().tobytes() == objs[key][off:off + length], (epoch, i)
                seen.append(i)
                h, m, o = last.get(wid, (0, 0, 0))
                last[wid] = (max(h, hits), max(m, misses), max(o, offplan))
            assert sorted(seen) == list(range(len(ds)))
            orders.append(seen)
            assert sorted(last) == [0, 1, 2, 3]
            hits = sum(v[0] for v in last.values())
            misses = sum(v[1] for v in last.values())
            assert sum(v[2] for v in last.values()) == 0, last  # every read followed its plan
            assert hits + misses == len(ds), last
            print("epoch %d: %d plan hits, %d misses" % (epoch, hits, misses))
        assert orders[0] != orders[1]  # set_epoch drew a new permutation
        assert hits >= 0.95 * len(ds), (hits, misses)


def test_example_with_plans(harness, tmp_path):
    """examples/pytorch_shards.py --plan: 2 epochs of whole shards, 4 workers, exact."""
    import hashlib
    import subprocess
    import sys
    from conftest import SANITIZER_RE, SRC, python_env
    from test_pytorch import make_shards
    root = str(tmp_path / "store")
    shards = make_shards(root, 12)
    storage = "file://" + root
    meta = "sqlite3://%s/meta.db" % harness.tmp
    for m in ("a", "b"):
        harness.member(m, storage, "--meta", meta, "--cache-group", "g", "--block-size", "256K")
    harness.wait_members(meta, "g", 2)
    r = subprocess.run([sys.executable, os.path.join(SRC, "examples", "pytorch_shards.py"),
                        "--storage", storage, "--prefix", "shards/", "--meta", meta,
                        "--cache-group", "g", "--block-size", "256K", "--workers", "4",
                        "--epochs", "2", "--plan"],
                       capture_output=True, env=python_env(ASAN_OPTIONS="detect_leaks=0"),
                       timeout=600)
    err = r.stderr.decode("utf-8", "replace")
    # A sanitizer report from its start (a worker's report is otherwise cut off by the
    # DataLoader's own traceback after it).
    report = re.search(SANITIZER_RE.pattern.decode(), err)
    head = err[max(0, report.start() - 200):][:6000] if report else ""
    assert r.returncode == 0, head + err[-3000:]
    assert not SANITIZER_RE.search(r.stderr), err[-3000:]
    seen = {}
    for line in r.stdout.decode().splitlines():
        digest, size, key = line.split(" ", 2)
        assert digest == hashlib.sha256(shards[key]).hexdigest() and int(size) == len(shards[key])
        seen[key] = seen.get(key, 0) + 1
    assert seen == {k: 2 for k in shards}
