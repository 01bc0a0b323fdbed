"""Access plans (Client.plan, shoal_plan_* in libshoal): reads that follow the plan are exact and
counted as plan hits or misses; reads off the plan, items past the end of the data, an empty
plan and a plan naming a missing key behave; the window and the process's memory stay bounded
for a plan far longer than the queue; a member killed under a plan, or a reader killed in the
middle of one, costs nothing but speed; a plan made before fork() is refused in the child;
`shoal warmup --plan` fills the group in first-use order; shoal stats shows the figures."""
import json
import os
import time
import random
import signal
import subprocess
import sys

import pytest

import shoal
from conftest import BLOCK, python_env

RECORD = 4096


def make_objects(root, n, size, seed=30):
    rnd = random.Random(seed)
    os.makedirs(os.path.join(root, "rec"), exist_ok=True)
    objs = {}
    for i in range(n):
        key = "rec/part-%02d.bin" % i
        data = rnd.randbytes(size)
        with open(os.path.join(root, key), "wb") as f:
            f.write(data)
        objs[key] = data
    return objs


def records(objs, record=RECORD):
    return [(k, off, record) for k in sorted(objs) for off in range(0, len(objs[k]), record)]


def counters():
    return {n: shoal.counter(n) for n in ("plan_hits", "plan_misses", "plan_offplan_reads",
                                          "plan_unused_bytes", "object_get_requests",
                                          "remotecache_get_requests")}


def test_random_order_through_a_group_and_a_member_killed(harness, tmp_path):
    """10,000 records over 64 objects in a random order, through a 2-member group; halfway one
    member is killed (SIGKILL) and the rest of the plan still reads exact."""
    root = str(tmp_path / "store")
    # 64 objects of 160 KiB + a bit: 41 records each, the last one short; 10,000 read in all.
    objs = make_objects(root, 64, 40 * RECORD + 1000)
    recs = records(objs)
    rnd = random.Random(1)
    order = [rnd.choice(recs) for _ in range(10000)]
    storage = "file://" + root
    meta = "sqlite3://%s/meta.db" % harness.tmp
    for m in ("a", "b"):
        harness.member(m, storage, "--meta", meta, "--cache-group", "g", "--block-size", "256K")
    harness.wait_members(meta, "g", 2)
    before = counters()
    with shoal.Client(storage, meta=meta, cache_group="g", block_size="256K",
                      buffer_size="16M") as c:
        with c.plan(iter(order), window=8 << 20, inflight=4) as p:
            buf = bytearray(RECORD)
            for i, (key, off, length) in enumerate(order):
                if i == 5000:
                    # Up to here every block came from its owner: no store GET in this process.
                    assert shoal.counter("object_get_requests") == before["object_get_requests"]
                    assert shoal.counter("remotecache_get_requests") > \
                        before["remotecache_get_requests"]
                    b = harness.procs.pop("b")
                    b.popen.send_signal(signal.SIGKILL)
                    b.popen.wait()
                n = p.readinto(key, off, buf)
                want = objs[key][off:off + length]
                assert n == len(want) and buf[:n] == want, (i, key, off)
            st = p.stats()
            assert st["window_max"] == 8 << 20 and st["window_bytes"] <= st["window_max"]
    after = counters()
    assert st["hits"] + st["misses"] == 10000 and st["offplan"] == 0
    assert after["plan_hits"] - before["plan_hits"] == st["hits"]
    assert after["plan_misses"] - before["plan_misses"] == st["misses"]
    assert st["prefetched"] > 0 and st["unused"] == 0
    assert st["hits"] > 0


def test_off_plan_reads_and_skipped_items(tmp_path):
    root = str(tmp_path / "store")
    objs = make_objects(root, 4, 3 * BLOCK + 7)
    recs = records(objs, 65536)
    random.Random(2).shuffle(recs)
    keys = sorted(objs)
    with shoal.Client("file://" + root, block_size="256K", buffer_size="8M") as c:
        with c.plan(recs) as p:
            for i, (key, off, length) in enumerate(recs):
                if i % 3 == 0:  # something the plan does not name next
                    k = keys[i % 4]
                    o = (i * 7919) % len(objs[k])
                    assert p.read(k, o, 5000) == objs[k][o:o + 5000]
                if i % 10 == 9:
                    continue  # skipped: the next read moves past it
                assert p.read(key, off, length) == objs[key][off:off + length]
            st = p.stats()
        assert st["offplan"] >= len(recs) // 3 - 10
        assert st["hits"] + st["misses"] == len(recs) - len(recs) // 10
        # Reads in pieces follow the item they fall in.
        with c.plan([(keys[0], 0, None)]) as p:
            got = b"".join(p.read(keys[0], off, 100000) for off in range(0, len(objs[keys[0]]),
                                                                          100000))
            assert got == objs[keys[0]]
            st = p.stats()
            assert st["offplan"] == 0 and st["queued"] == 0


def test_plan_longer_than_the_data_and_left_unread(tmp_path):
    root = str(tmp_path / "store")
    objs = make_objects(root, 2, BLOCK + 100)
    k0, k1 = sorted(objs)
    size = BLOCK + 100
    items = [(k0, 0, None), (k0, size - 10, 1000), (k0, size, 10), (k1, size + 5000, 1),
             k1, (k1, 0, 50)] + [(k1, 0, 50)] * 500
    unused0 = shoal.counter("plan_unused_bytes")
    with shoal.Client("file://" + root, block_size="256K", buffer_size="8M") as c:
        p = c.plan(items)
        assert p.read(k0) == objs[k0]
        assert p.read(k0, size - 10, 1000) == objs[k0][-10:]  # clipped to the object
        assert p.read(k0, size, 10) == b""
        assert p.read(k1, size + 5000, 1) == b""
        assert p.read(k1) == objs[k1]
        assert p.read(k1, 0, 50) == objs[k1][:50]
        st = p.stats()
        assert st["offplan"] == 0 and st["hits"] + st["misses"] == 6
        assert st["queued"] == 500  # the job stops early: closing gives everything back
        # The planner fetches the next item in the background: wait until it holds it (on a
        # busy machine it may not have yet), so that closing leaves it fetched and unread.
        deadline = time.monotonic() + 60
        while p.stats()["window_bytes"] == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert p.stats()["window_bytes"] > 0, "the planner fetched nothing ahead"
        p.close()
        p.close()
        with pytest.raises(ValueError):
            p.read(k0, 0, 1)
        # The 500 items left were fetched (one range, already in memory) and never read.
        assert shoal.counter("plan_unused_bytes") > unused0
        # The window went back: a plan as large as plans may be fits again.
        with c.plan([k0], window=(32 - 4) * BLOCK) as q:
            assert q.read(k0, 0, 10) == objs[k0][:10]
        with pytest.raises(ValueError):
            c.plan([k0], window=(32 - 3) * BLOCK)


def test_empty_plan_and_a_missing_key_at_its_item(tmp_path):
    root = str(tmp_path / "store")
    objs = make_objects(root, 2, 5000)
    k0, k1 = sorted(objs)
    with shoal.Client("file://" + root, block_size="256K", buffer_size="8M") as c:
        with c.plan([]) as p:
            assert p.read(k0, 10, 100) == objs[k0][10:110]
            assert p.stats()["offplan"] == 1 and p.stats()["queued"] == 0
        with c.plan(iter(())) as p:
            assert p.read(k1) == objs[k1]

        def gen():
            yield k0
            yield (k1, 0, 100)
            yield "rec/no-such-object.bin"
            yield ("rec/no-such-object.bin", 10, 10)
            yield "bad\x01key"
            yield k1
        with c.plan(gen()) as p:
            assert p.read(k0) == objs[k0]
            assert p.read(k1, 0, 100) == objs[k1][:100]
            with pytest.raises(FileNotFoundError, match="no such object"):
                p.read("rec/no-such-object.bin", 0, 10)
            with pytest.raises(FileNotFoundError):
                p.read("rec/no-such-object.bin", 10, 10)
            with pytest.raises(OSError) as e:
                p.read("bad\x01key", 0, 10)
            assert e.value.errno == 22
            assert p.read(k1) == objs[k1]
            st = p.stats()
            assert st["offplan"] == 0 and st["queued"] == 0
        with pytest.raises(TypeError):
            c.plan([42])
        with pytest.raises(ValueError):
            c.plan([(k0, 0, 0)])


MEMORY_CHILD = r"""
import json, random, sys
import shoal

def rss():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024

root, n_items, record, block = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
keys = ["rec/part-%02d.bin" % i for i in range(8)]

def gen(seed):
    rnd = random.Random(seed)
    for _ in range(n_items):
        yield keys[rnd.randrange(8)], rnd.randrange(0, 10 * block - record), record

out = {"window_ok": True, "queue_ok": True}
with shoal.Client("file://" + root, block_size="256K", buffer_size="16M") as c:
    buf = bytearray(record)
    base = peak = rss()
    with c.plan(gen(3), window=8 << 20) as p:
        for i, (k, off, length) in enumerate(gen(3)):
            assert p.readinto(k, off, buf) == record
            if i % 10000 == 0:
                st = p.stats()
                out["window_ok"] &= st["window_bytes"] <= 8 << 20
                out["queue_ok"] &= st["queued"] <= 4096
                peak = max(peak, rss())
        out["stats"] = p.stats()
    out["base"], out["peak"] = base, max(peak, rss())
print(json.dumps(out))
"""


def test_memory_stays_within_the_window(tmp_path):
    """A plan of 300,000 items (60 passes over 20 MiB) read to its end, in a child process
    (without the sanitizer's quarantine, which would keep every freed allocation resident): the
    window never exceeds its size, the queue never its bound, and the process grows by no more
    than its buffers and a margin."""
    root = str(tmp_path / "store")
    make_objects(root, 8, 10 * BLOCK)
    n_items = 300000
    r = subprocess.run([sys.executable, "-c", MEMORY_CHILD, root, str(n_items), str(RECORD),
                        str(BLOCK)], capture_output=True, timeout=600,
                       env=python_env(ASAN_OPTIONS="detect_leaks=0:quarantine_size_mb=0:"
                                      "thread_local_quarantine_size_kb=0"))
    assert r.returncode == 0, r.stderr.decode("utf-8", "replace")[-3000:]
    out = json.loads(r.stdout.decode().strip().splitlines()[-1])
    assert out["window_ok"] and out["queue_ok"]
    st = out["stats"]
    assert st["hits"] + st["misses"] == n_items and st["offplan"] == 0
    # The buffers (16 MiB, the window inside them) plus a generous margin for the interpreter
    # and the sanitizer: far below what 300,000 items held at once would take.
    growth = out["peak"] - out["base"]
    assert growth < (16 << 20) + (48 << 20), out


def test_metrics_endpoint_and_shoal_stats_show_plans(tmp_path):
    from conftest import SHOAL, free_port
    import urllib.request
    root = str(tmp_path / "store")
    objs = make_objects(root, 2, 2 * BLOCK)
    k0, k1 = sorted(objs)
    addr = "127.0.0.1:%d" % free_port()
    with shoal.Client("file://" + root, block_size="256K", buffer_size="8M", metrics=addr) as c:
        with c.plan([(k0, 0, 1000), (k1, 0, None)]) as p:
            assert p.read(k0, 0, 1000) == objs[k0][:1000]
            assert p.read(k1) == objs[k1]
            assert p.read(k0, 5, 5) == objs[k0][5:10]  # off the plan
            with urllib.request.urlopen("http://%s/metrics" % addr, timeout=10) as r:
                text = r.read().decode()
            values = {}
            for line in text.splitlines():
                if line.startswith("plan_"):
                    name, v = line.rsplit(" ", 1)
                    values[name.split("{", 1)[0]] = float(v)
            assert values["plan_hits"] + values["plan_misses"] >= 2
            assert values["plan_offplan_reads"] >= 1
            assert values["plan_window_bytes"] == p.stats()["window_bytes"]
            r = subprocess.run([SHOAL, "stats", addr, "--schema", "p", "-l", "1", "-c", "2",
                                "--interval", "1"], capture_output=True, text=True, timeout=60,
                               env=dict(os.environ, ASAN_OPTIONS="detect_leaks=0"))
            assert r.returncode == 0, r.stderr
            head = r.stdout.splitlines()
            assert any(all(w in line.split() for w in ("hits", "miss", "pref", "win", "unused",
                                                       "off")) for line in head), r.stdout


KILLED_WORKER = r"""
import sys
import shoal
storage, meta, keys = sys.argv[1], sys.argv[2], sys.argv[3:]
c = shoal.Client(storage, meta=meta, cache_group="g", block_size="256K", buffer_size="16M")

def items():
    while True:
        for k in keys:
            for off in range(0, 3 * 262144, 65536):
                yield k, off, 65536
p = c.plan(items())
it = items()
for i in range(100000):
    k, off, n = next(it)
    assert len(p.read(k, off, n)) == n
    if i == 20:
        print("reading", flush=True)
"""


def test_warmup_plan_fills_the_group_in_first_use_order(harness, tmp_path):
    """shoal warmup --plan: every block the plan touches is fetched once, by its owner (one
    store GET per distinct block however often the plan names it), and a plan read afterwards
    makes no store GET at all; a missing key is a counted error (exit 1), a bad line exit 2."""
    from conftest import MEMBER_ASAN, SHOAL
    root = str(tmp_path / "store")
    objs = make_objects(root, 6, 3 * BLOCK + 500)
    keys = sorted(objs)
    storage = "file://" + root
    meta = "sqlite3://%s/meta.db" % harness.tmp
    for m in ("a", "b"):
        harness.member(m, storage, "--meta", meta, "--cache-group", "g", "--block-size", "256K")
    harness.wait_members(meta, "g", 2)
    rnd = random.Random(5)
    # Objects 0-3 only: 0 and 1 whole (keys), 2 and 3 as records, many of them twice.
    items = [keys[0], keys[1]] + [(keys[2 + rnd.randrange(2)], rnd.randrange(3 * BLOCK), 3000)
                                  for _ in range(200)]
    blocks = set()
    for it in items:
        k, off, n = (it, 0, len(objs[it])) if isinstance(it, str) else it
        for b in range(off // BLOCK, (min(off + n, len(objs[k])) - 1) // BLOCK + 1):
            blocks.add((k, b))
    plan = tmp_path / "plan.txt"
    plan.write_text("".join((it if isinstance(it, str) else "%s\t%d\t%d" % it) + "\n"
                            for it in items) + "\n")
    flags = ["--meta", meta, "--cache-group", "g", "--block-size", "256K"]
    env = dict(os.environ, ASAN_OPTIONS=MEMBER_ASAN)
    gets = lambda: sum(harness.metrics(m).get("object_get_requests", 0) for m in ("a", "b"))
    r = subprocess.run([SHOAL, "warmup", "--storage", storage, "--plan", str(plan), *flags],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "%d/%d blocks" % (len(blocks), len(blocks)) in r.stderr, r.stderr
    assert gets() == len(blocks)
    iorpc0 = shoal.counter("remotecache_iorpc_get_bytes")
    # A worker killed (SIGKILL) in the middle of its plan costs the group nothing.
    child = subprocess.Popen([sys.executable, "-c", KILLED_WORKER, storage, meta, *keys[:4]],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env=python_env(ASAN_OPTIONS="detect_leaks=0"))
    try:
        assert child.stdout.readline().strip() == b"reading", child.stderr.read()[-2000:]
        child.send_signal(signal.SIGKILL)
    finally:
        child.wait(timeout=60)
    # Over IORPC this time: plans fetch through every transport.
    with shoal.Client(storage, meta=meta, cache_group="g", block_size="256K",
                      buffer_size="16M", use_iorpc=True) as c:
        with c.plan(items) as p:
            for it in items:
                k, off, n = (it, 0, None) if isinstance(it, str) else it
                want = objs[k][off:] if n is None else objs[k][off:off + n]
                assert p.read(k, off, n) == want
    assert gets() == len(blocks)  # everything came from the owners' caches
    assert shoal.counter("remotecache_iorpc_get_bytes") > iorpc0
    bad = tmp_path / "bad.txt"
    bad.write_text("%s\nrec/no-such.bin\n" % keys[4])
    r = subprocess.run([SHOAL, "warmup", "--storage", storage, "--plan", str(bad), *flags],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 1 and "rec/no-such.bin: no such object" in r.stderr, r.stderr
    bad.write_text("%s\t12\n" % keys[4])
    r = subprocess.run([SHOAL, "warmup", "--storage", storage, "--plan", str(bad), *flags],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 2 and "bad.txt:1: expected KEY" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_a_plan_belongs_to_the_process_that_made_it(tmp_path):
    root = str(tmp_path / "store")
    objs = make_objects(root, 1, 2 * BLOCK)
    (k,) = objs
    with shoal.Client("file://" + root, block_size="256K", buffer_size="8M") as c:
        with c.plan([(k, 0, 100), (k, 100, 100)]) as p:
            assert p.read(k, 0, 100) == objs[k][:100]
            pid = os.fork()
            if pid == 0:  # the child: the parent's plan is refused, a new one works
                code = 1
                try:
                    try:
                        p.read(k, 100, 100)
                    except OSError as e:
                        if e.errno == 22 and "after fork" in str(e):
                            with c.plan([(k, 5, 5)]) as q:
                                code = 0 if q.read(k, 5, 5) == objs[k][5:10] else 3
                        else:
                            code = 4
                finally:
                    os._exit(code)
            _, status = os.waitpid(pid, 0)
            assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
            assert p.read(k, 100, 100) == objs[k][100:200]
            assert p.stats()["offplan"] == 0


def test_an_item_larger_than_the_window_streams_through_it(tmp_path):
    """A whole object of 16 blocks as one item, a window of 4 blocks, read in 64 KiB pieces:
    the blocks already read leave the window, so fetching ahead goes on to the item's end."""
    root = str(tmp_path / "store")
    objs = make_objects(root, 2, 16 * BLOCK)
    k0, k1 = sorted(objs)
    with shoal.Client("file://" + root, block_size="256K", buffer_size="8M") as c:
        with c.plan([k0, k1], window=4 * BLOCK, inflight=2) as p:
            for k in (k0, k1):
                got = bytearray()
                for off in range(0, 16 * BLOCK, 65536):
                    got += p.read(k, off, 65536)
                    assert p.stats()["window_bytes"] <= 4 * BLOCK
                assert got == objs[k]
            st = p.stats()
        assert st["offplan"] == 0 and st["queued"] == 0
        # Every block of both objects was fetched ahead at least once: the window did not stall
        # after its first 4 blocks.
        assert st["prefetched"] >= 32 * BLOCK * 0.5
