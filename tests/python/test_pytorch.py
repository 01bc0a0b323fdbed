"""PyTorch [P2]: examples/pytorch_shards.py with a DataLoader of 4 forked worker processes reads
every shard once, byte-exact (SHA-256), through a 3-member group that makes exactly one store
GET per block; the same Dataset in this process with forked workers, twice (a second epoch forks
new workers from a parent that has read)."""
import hashlib
import os
import random
import subprocess
import sys

import pytest
import torch
from torch.utils.data import DataLoader

from conftest import BLOCK, SANITIZER_RE, SRC, blocks_of, python_env

# 4 workers on a 2-core machine is the point here.
pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create")

sys.path.insert(0, os.path.join(SRC, "examples"))
import pytorch_shards  # noqa: E402


def make_shards(root, n=24):
    rnd = random.Random(24)
    shards = {}
    for i in range(n):
        key = "shards/part-%03d %s.bin" % (i, "é" if i % 5 == 0 else "x")
        size = rnd.randrange(1, 5 * BLOCK)
        data = rnd.randbytes(size)
        os.makedirs(os.path.join(root, "shards"), exist_ok=True)
        with open(os.path.join(root, key), "wb") as f:
            f.write(data)
        shards[key] = data
    os.makedirs(os.path.join(root, "other"), exist_ok=True)
    with open(os.path.join(root, "other", "not-a-shard.txt"), "wb") as f:
        f.write(b"x" * 1000)
    return shards


def start_group(harness, storage):
    meta = "sqlite3://%s/meta.db" % harness.tmp
    for m in ("a", "b", "c"):
        harness.member(m, storage, "--meta", meta, "--cache-group", "g", "--block-size", "256K")
    harness.wait_members(meta, "g", 3)
    return meta


def group_gets(harness):
    return sum(harness.metrics(m).get("object_get_requests", 0) for m in ("a", "b", "c"))


def test_example_dataloader_4_workers(harness, tmp_path):
    root = str(tmp_path / "store")
    shards = make_shards(root)
    meta = start_group(harness, "file://" + root)
    r = subprocess.run([sys.executable, os.path.join(SRC, "examples", "pytorch_shards.py"),
                        "--storage", "file://" + root, "--prefix", "shards/", "--meta", meta,
                        "--cache-group", "g", "--block-size", "256K", "--workers", "4"],
                       capture_output=True, env=python_env(ASAN_OPTIONS="detect_leaks=0"),
                       timeout=600)
    err = r.stderr.decode("utf-8", "replace")
    assert r.returncode == 0, err[-3000:]
    assert not SANITIZER_RE.search(r.stderr), err[-3000:]
    seen = {}
    for line in r.stdout.decode().splitlines():
        digest, size, key = line.split(" ", 2)
        assert key not in seen, "read twice: " + key
        seen[key] = (digest, int(size))
    assert seen == {k: (hashlib.sha256(d).hexdigest(), len(d)) for k, d in shards.items()}
    assert "24 shards x 1 epochs" in err and "with 4 workers" in err
    assert group_gets(harness) == blocks_of(shards)


def test_dataset_in_this_process_two_epochs(harness, tmp_path):
    root = str(tmp_path / "store")
    shards = make_shards(root, 16)
    meta = start_group(harness, "file://" + root)
    ds = pytorch_shards.ShardDataset("file://" + root, "shards/", ".bin", meta=meta,
                                     cache_group="g", block_size="256K")
    assert sorted(ds.keys) == sorted(shards)
    key, digest, t = ds[0]  # the parent reads before the workers fork
    assert t.numpy().tobytes() == shards[key]
    for epoch in range(2):
        seen = {}
        loader = DataLoader(ds, batch_size=None, shuffle=True, num_workers=4,
                            multiprocessing_context="fork")
        for key, digest, t in loader:
            assert isinstance(t, torch.Tensor) and t.dtype == torch.uint8
            assert key not in seen
            seen[key] = digest
            assert t.numpy().tobytes() == shards[key]
        assert seen == {k: hashlib.sha256(d).hexdigest() for k, d in shards.items()}, epoch
    assert group_gets(harness) == blocks_of(shards)
    ds.client.close()


def test_spawned_workers_reopen_the_client(harness, tmp_path, monkeypatch):
    """With the "spawn" start method the Dataset is pickled: its Client opens anew in each
    worker from the same settings."""
    root = str(tmp_path / "store")
    shards = make_shards(root, 6)
    meta = start_group(harness, "file://" + root)
    ds = pytorch_shards.ShardDataset("file://" + root, "shards/", meta=meta, cache_group="g",
                                     block_size="256K")
    env = python_env()
    if "LD_PRELOAD" in env:  # a spawned interpreter needs the sanitizer runtime too
        monkeypatch.setenv("LD_PRELOAD", env["LD_PRELOAD"])
    loader = DataLoader(ds, batch_size=None, num_workers=2, multiprocessing_context="spawn")
    seen = {key: digest for key, digest, _ in loader}
    assert seen == {k: hashlib.sha256(d).hexdigest() for k, d in shards.items()}
    ds.client.close()
