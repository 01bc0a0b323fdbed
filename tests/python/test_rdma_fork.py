"""RDMA and fork (issue 32 item 3): a Python client with RDMA on (libfabric's tcp provider over
lo) that has read over RDMA forks 4 DataLoader workers while a thread of the parent keeps reading.
Every worker reads its shards byte-exact, within a bounded time (a hang fails the test), and over
RDMA of its own: each worker's pid logs its own `transport:RDMA` connection (the child never
touches the parent's fabric; on tcp, which keeps no device state, it opens its own), and none
logs the fall back to TCP that a child of a process that opened verbs takes. The fork gate holds
the parent's RDMA progress and connector threads (and its reading thread) out of the fork."""
import hashlib
import os
import random
import re
import subprocess
import sys

from conftest import SANITIZER_RE, SRC, python_env

WORKER = r'''
import hashlib, os, sys, threading
import torch
from torch.utils.data import DataLoader, Dataset
import shoal

storage, meta, log, keys = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
c = shoal.Client(storage, meta=meta, cache_group="g", rdma_network="lo", rdma_provider="tcp",
                 block_size="256K", log_file=log, log_level="info")
first = c.read(keys[0])  # the parent reads over RDMA before any fork

class Shards(Dataset):
    def __len__(self):
        return len(keys)
    def __getitem__(self, i):
        return os.getpid(), keys[i], hashlib.sha256(c.read(keys[i])).hexdigest()

stop = threading.Event()
reads = [0]
def keep_reading():  # the parent reads while the workers fork
    while not stop.is_set():
        assert c.read(keys[0]) == first
        reads[0] += 1
t = threading.Thread(target=keep_reading)
t.start()
loader = DataLoader(Shards(), batch_size=None, num_workers=4, multiprocessing_context="fork",
                    timeout=120)
for pid, key, digest in loader:
    print(pid, digest, key, flush=True)
stop.set()
t.join()
print("parent", os.getpid(), reads[0], flush=True)
'''


def test_forked_dataloader_workers_read_over_rdma(harness, tmp_path, monkeypatch):
    monkeypatch.setenv("FI_PROVIDER", "tcp")
    root = tmp_path / "store"
    rnd = random.Random(32)
    shards = {}
    for i in range(16):
        key = "s/part-%02d" % i
        data = rnd.randbytes(rnd.randrange(1, 700 * 1024))
        (root / "s").mkdir(parents=True, exist_ok=True)
        (root / key).write_bytes(data)
        shards[key] = data
    meta = "sqlite3://%s/meta.db" % tmp_path
    storage = "file://%s" % root
    for m in ("a", "b"):
        harness.member(m, storage, "--meta", meta, "--cache-group", "g", "--block-size", "256K",
                       "--rdma-network", "lo")
    harness.wait_members(meta, "g", 2)
    log = str(tmp_path / "client.log")
    r = subprocess.run([sys.executable, "-c", WORKER, storage, meta, log, *sorted(shards)],
                       capture_output=True, timeout=300,
                       env=python_env(ASAN_OPTIONS="detect_leaks=0", FI_PROVIDER="tcp",
                                      IPATH_NO_BACKTRACE="1"))
    err = r.stderr.decode("utf-8", "replace")
    assert r.returncode == 0, err[-3000:]
    assert not SANITIZER_RE.search(r.stderr), err[-3000:]
    seen, workers, parent = {}, set(), None
    for line in r.stdout.decode().splitlines():
        a, b, key = line.split(" ", 2)
        if a == "parent":
            parent = int(b)
            continue
        assert key not in seen, "read twice: " + key
        seen[key] = b
        workers.add(int(a))
    assert seen == {k: hashlib.sha256(d).hexdigest() for k, d in shards.items()}
    assert parent is not None and parent not in workers and len(workers) >= 2, (parent, workers)
    text = open(log, encoding="utf-8", errors="replace").read()
    rdma_pids = {int(p) for p in re.findall(r"shoal\[(\d+)\] <[A-Z]+>: iorpc: iorpc client "
                                            r"started, server address \S+, transport:RDMA", text)}
    assert parent in rdma_pids, text[-2000:]
    assert workers <= rdma_pids, "workers without an RDMA connection of their own: %s" % (
        workers - rdma_pids)
    assert "reads over IORPC on TCP (start workers with spawn" not in text
    assert "Cannot establish rpc connection" not in text, text[-2000:]
