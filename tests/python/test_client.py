"""shoal.Client [P2]: read, readinto and open byte-exact for every object of a file:// and an
s3:// (s3rver) bucket with awkward keys, read through a 2-member group (the client itself makes
no store GET; the group makes one per block); 8 Python threads at once; bad settings raise with
the library's message, and so does a bad environment override (the process lives on); a missing
key raises FileNotFoundError."""
import concurrent.futures
import io
import os
import random
import re
import subprocess
import sys

import numpy
import pytest

import shoal
from conftest import BLOCK, SANITIZER_RE, SHOAL, blocks_of, make_tree, python_env, wait_until

MULTI = [("multi/m%d.bin" % i, BLOCK * (i + 2) + 1000 * i) for i in range(4)]


def check_object(c, key, data, rnd):
    size = len(data)
    st = c.stat(key)
    assert st.size == size and st.version and st.block_size == BLOCK, (key, st)
    assert c.read(key) == data, key
    for _ in range(3):
        off = rnd.randrange(0, size + 1)
        length = rnd.randrange(0, 2 * BLOCK)
        assert c.read(key, off, length) == data[off:off + length], (key, off, length)
    assert c.read(key, size + 10, 5) == b""
    # readinto: a bytearray, a memoryview into the middle of a larger buffer, a numpy array.
    ba = bytearray(size)
    assert c.readinto(key, 0, ba) == size and ba == data, key
    big = bytearray(size + 64)
    assert c.readinto(key, 0, memoryview(big)[32:32 + size]) == size
    assert big[32:32 + size] == data and big[:32] == bytes(32) and big[32 + size:] == bytes(32)
    arr = numpy.zeros(size, dtype=numpy.uint8)
    assert c.readinto(key, 0, arr) == size and arr.tobytes() == data, key
    if size > 7:
        tail = numpy.zeros(size, dtype=numpy.uint8)
        assert c.readinto(key, 7, tail) == size - 7 and tail[:size - 7].tobytes() == data[7:]
    # open: buffered sequential reads, seeks, readinto, and the raw file.
    with c.open(key) as f:
        assert isinstance(f, io.BufferedReader) and f.seekable()
        got = b""
        while True:
            chunk = f.read(rnd.choice([1, 100, 65536, BLOCK + 3]))
            if not chunk:
                break
            got += chunk
        assert got == data, key
        if size:
            pos = rnd.randrange(size)
            f.seek(pos)
            assert f.tell() == pos and f.read(1000) == data[pos:pos + 1000]
            f.seek(-min(size, 10), io.SEEK_END)
            assert f.read() == data[-min(size, 10):]
    with c.open(key, buffering=0, advice="sequential") as raw:
        assert raw.size == size and raw.version == st.version
        buf = bytearray(BLOCK // 3 + 1)
        got = bytearray()
        while True:
            n = raw.readinto(buf)
            if not n:
                break
            got += buf[:n]
        assert got == data, key
        assert raw.readall() == b""
        raw.seek(0)
        assert raw.readall() == data


def read_everything(c, objs):
    rnd = random.Random(1)
    for key in sorted(objs):
        check_object(c, key, objs[key], rnd)
    listed = {e.key: e.size for e in c.list("", recursive=True)}
    assert listed == {k: len(v) for k, v in objs.items()}


def group_gets(harness, members):
    return sum(harness.metrics(m).get("object_get_requests", 0) for m in members)


def run_group(harness, storage, objs, client_settings, member_flags=()):
    meta = "sqlite3://%s/meta.db" % harness.tmp
    for m in ("a", "b"):
        harness.member(m, storage, "--meta", meta, "--cache-group", "g", "--block-size", "256K",
                       *member_flags)
    harness.wait_members(meta, "g", 2)
    before = shoal.counter("object_get_requests")
    with shoal.Client(storage, meta=meta, cache_group="g", block_size="256K",
                      **client_settings) as c:
        read_everything(c, objs)
        # Cold reads went to the owners: one store GET per block in the group, none here.
        assert shoal.counter("object_get_requests") == before
        assert group_gets(harness, ["a", "b"]) == blocks_of(objs)
        # 8 threads at once (ctypes lets go of the GIL inside the library).
        keys = sorted(objs) * 3

        def one(key):
            buf = bytearray(len(objs[key]))
            n = c.readinto(key, 0, buf)
            return n == len(objs[key]) and buf == objs[key]
        with concurrent.futures.ThreadPoolExecutor(8) as ex:
            assert all(ex.map(one, keys))
        assert group_gets(harness, ["a", "b"]) == blocks_of(objs)
        for missing in ("no/such/key", "space dir/file with spaces.bin.x"):
            with pytest.raises(FileNotFoundError, match="no such object"):
                c.stat(missing)
            with pytest.raises(FileNotFoundError):
                c.read(missing)
            with pytest.raises(FileNotFoundError):
                c.readinto(missing, 0, bytearray(10))
            with pytest.raises(FileNotFoundError):
                c.open(missing)


def test_file_store_through_group(harness, tmp_path):
    root = str(tmp_path / "store")
    objs = make_tree(root, MULTI)
    run_group(harness, "file://" + root, objs, {})


def test_s3_store_through_group(harness, s3rver, tmp_path):
    endpoint, bucket, put = s3rver
    root = str(tmp_path / "store")
    objs = make_tree(root, MULTI)
    put(root)
    run_group(harness, "s3://" + bucket, objs, {"endpoint": endpoint},
              member_flags=("--endpoint", endpoint))


def test_s3_store_without_group(harness, s3rver, tmp_path):
    endpoint, bucket, put = s3rver
    root = str(tmp_path / "store")
    objs = make_tree(root)
    put(root)
    before = shoal.counter("object_get_requests")
    with shoal.Client("s3://" + bucket, endpoint=endpoint, block_size="256K") as c:
        read_everything(c, objs)
    assert shoal.counter("object_get_requests") - before == blocks_of(objs)


def _iorpc_port(harness, name):
    """The IORPC port of NAME's newest process, from its "ready" line."""
    found = re.findall(rb"ready: .*iorpc 127\.0\.0\.1:(\d+)", harness.procs[name].log_text())
    return int(found[-1]) if found else 0


def _client_sockets(port):
    """This process's TCP sockets connected to PORT (another test may listen on it later)."""
    out = subprocess.run(["ss", "-Htanp", "dport = :%d" % port], capture_output=True, text=True,
                         check=True).stdout
    mine = "pid=%d," % os.getpid()
    return [l for l in out.splitlines() if mine in l]


def test_iorpc_connections_to_a_restarted_member_close(harness, tmp_path):
    """IORPC callers read their own connections; nobody reads one that carries no request. A
    member that restarts closes them and listens on another port: the client must close them
    (the scaler looks every grow period), not keep them open for ever, and read on."""
    root = str(tmp_path / "store")
    objs = make_tree(root, MULTI)
    os.makedirs(os.path.join(root, "after"))
    storage = "file://" + root
    meta = "sqlite3://%s/meta.db" % harness.tmp
    flags = ("--meta", meta, "--cache-group", "g", "--block-size", "256K")
    harness.member("a", storage, *flags)
    harness.wait_members(meta, "g", 1)
    wait_until("a's ready line", lambda: _iorpc_port(harness, "a"))
    old = _iorpc_port(harness, "a")
    with shoal.Client(storage, meta=meta, cache_group="g", block_size="256K",
                      use_iorpc=True) as c:
        read_everything(c, objs)
        assert _client_sockets(old), "no IORPC connection to port %d" % old
        harness.stop("a")
        harness.member("a", storage, *flags)
        # a (the same member: it keeps its id in its cache folder) and this client
        harness.wait_members(meta, "g", 2)
        wait_until("a's new ready line", lambda: _iorpc_port(harness, "a") not in (0, old))
        # Closed by the member, nobody reading them: gone within a few grow periods.
        wait_until("connections to the old port closed", lambda: not _client_sockets(old))
        # The client learns a's new address from its view, a heartbeat or so after a's record
        # changed (longer on a busy machine): read small new objects until one went over IORPC
        # to the new port, then check the next read strictly.
        probes = [0]

        def reads_over_iorpc():
            probes[0] += 1
            k = "after/probe%d.bin" % probes[0]
            with open(os.path.join(root, k), "wb") as f:
                f.write(b"p" * 4096)
            assert c.read(k) == b"p" * 4096
            return bool(_client_sockets(_iorpc_port(harness, "a")))
        wait_until("a read over IORPC to a's new port", reads_over_iorpc, interval=0.5)
        # A new object: no block of it is in this process's memory.
        data = random.Random(7).randbytes(3 * BLOCK + 5)
        with open(os.path.join(root, "after/restart.bin"), "wb") as f:
            f.write(data)
        fallbacks = shoal.counter("remotecache_fallbacks")
        gets = shoal.counter("object_get_requests")
        assert c.read("after/restart.bin") == data
        assert _client_sockets(_iorpc_port(harness, "a")), "not reading over IORPC"
        assert shoal.counter("remotecache_fallbacks") == fallbacks
        assert shoal.counter("object_get_requests") == gets


def test_bad_settings_raise_with_the_library_message(tmp_path):
    storage = "file://" + str(tmp_path)
    cases = [
        ({"cache_size": "lots"}, "invalid cache-size lots"),
        ({"block_size": "3K"}, "invalid block-size 3K"),
        ({"no_such_setting": 1}, "unknown setting no-such-setting"),
        ({"cache_group": "bad name!"}, "invalid cache-group bad name!"),
        ({"use_iorpc": "maybe"}, "invalid use-iorpc maybe"),
        ({"log_level": "loud"}, "invalid log-level loud"),
        ({"metrics": "nowhere"}, "invalid metrics nowhere"),
        ({"secret": b"short"}, "the group secret must be 16"),
        ({"group_secret_file": str(tmp_path / "missing")}, "cannot read group-secret-file"),
        ({"rdma_provider": "tcp"}, "rdma-provider needs rdma-network"),
        ({"group_weight": 5}, "setting group-weight is for a member that serves"),
    ]
    for settings, msg in cases:
        with pytest.raises(ValueError, match="^" + __import__("re").escape(msg)):
            shoal.Client(storage, **settings)
    with pytest.raises(ValueError, match="storage"):
        shoal.Client("bogus://x")
    # [M3]: RDMA that cannot be set up is an error, never a silent fall back to TCP; a missing
    # interface is a bad setting (exit 2 on the command line), so ValueError.
    with pytest.raises(ValueError, match="rdma-network no-such-if0: no such interface"):
        shoal.Client(storage, cache_group="g", meta="sqlite3://%s/m.db" % tmp_path,
                     rdma_network="no-such-if0")
    # A runtime failure (the registry cannot be opened) is an OSError with the message.
    with pytest.raises(OSError) as e:
        shoal.Client(storage, cache_group="g", meta="sqlite3:///proc/no/such/dir/m.db")
    assert not isinstance(e.value, ValueError) and "m.db" in str(e.value)
    with pytest.raises(ValueError, match="closed"):
        c = shoal.Client(storage)
        c.close()
        c.stat("x")


# In a Python of its own: the environment is read once per process, by the first open.
ENV_CHILD = r"""
import os, sys, shoal
try:
    shoal.Client(sys.argv[1])
    print("opened")
except ValueError as e:
    print("ValueError: %s" % e)
os.environ["IORPC_RDMA_RETRY_DURATION"] = "30s"
with shoal.Client(sys.argv[1]) as c:
    print("read: %s" % c.read("k").decode())
"""


def test_bad_environment_raises_and_the_process_lives_on(tmp_path):
    # A bad override is the open's ValueError naming the variable, never an exit of the host
    # process (the command line exits 2 for it); corrected, the next open reads it.
    (tmp_path / "k").write_bytes(b"abc")
    r = subprocess.run([sys.executable, "-c", ENV_CHILD, "file://" + str(tmp_path)],
                       capture_output=True, text=True, timeout=120,
                       env=python_env(IORPC_RDMA_RETRY_DURATION="5 minutes",
                                      ASAN_OPTIONS="detect_leaks=0"))
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    assert r.stdout.splitlines() == [
        "ValueError: invalid IORPC_RDMA_RETRY_DURATION=5 minutes: expected a positive duration "
        "like 500ms, 30s, 5m or 1h", "read: abc"], r.stdout
    assert not SANITIZER_RE.search(r.stderr.encode()), r.stderr


def test_open_files_keep_the_client_open(tmp_path):
    (tmp_path / "k").write_bytes(b"abc")
    c = shoal.Client("file://" + str(tmp_path))
    f = c.open("k")
    with pytest.raises(OSError, match="open files"):
        c.close()
    assert f.read() == b"abc"
    f.close()
    c.close()
    assert c.closed
    assert SHOAL  # the harness found the binary
    assert os.environ.get("SHOAL_LIBRARY") is None or os.path.exists(
        os.environ["SHOAL_LIBRARY"])


def test_group_secret_as_bytes(harness, tmp_path):
    """A group with a secret (bytes, a NUL among them): a client given the secret (as bytes or
    as the members' file) reads from the members; one without it is refused by them and reads
    the store itself [S1, G5]."""
    root = str(tmp_path / "store")
    objs = make_tree(root, MULTI[:2])
    secret = b"\x00shoal-secret\x01\x02\xff with a NUL"
    path = tmp_path / "secret"
    path.write_bytes(secret + b"\n")
    meta = "sqlite3://%s/meta.db" % harness.tmp
    for m in ("a", "b"):
        harness.member(m, "file://" + root, "--meta", meta, "--cache-group", "g",
                       "--block-size", "256K", "--group-secret-file", str(path))
    harness.wait_members(meta, "g", 2)
    common = dict(meta=meta, cache_group="g", block_size="256K")
    for settings in ({"secret": secret}, {"group_secret_file": str(path)}):
        before = shoal.counter("object_get_requests")
        with shoal.Client("file://" + root, **common, **settings) as c:
            for key, data in objs.items():
                assert c.read(key) == data, key
        assert shoal.counter("object_get_requests") == before, settings
    before = shoal.counter("object_get_requests")
    fallbacks = shoal.counter("remotecache_fallbacks")
    with shoal.Client("file://" + root, **common) as c:
        key = "multi/m1.bin"
        assert c.read(key) == objs[key]
    assert shoal.counter("object_get_requests") > before
    assert shoal.counter("remotecache_fallbacks") > fallbacks


def test_large_reads_into_fresh_bytes_are_exact(tmp_path):
    """read() of objects over the pre-fault size (256 KiB) fills bytes whose pages were faulted
    in first (MADV_POPULATE_WRITE): every byte is the object's, at every alignment and length;
    faulting in pages that hold data leaves the data as it was."""
    d = tmp_path / "store"
    d.mkdir()
    rnd = random.Random(28)
    data = rnd.randbytes(3 << 20)
    (d / "obj").write_bytes(data)
    with shoal.Client("file://%s" % d, cache_size=0) as c:
        for off, n in [(0, 1 << 20), (1, (1 << 20) - 1), (4095, 300000), (12345, None),
                       (0, None), ((3 << 20) - 300000, None)]:
            want = data[off:] if n is None else data[off:off + n]
            assert c.read("obj", off, n) == want
        with c.open("obj", buffering=0) as f:
            assert f.readall() == data
    buf = rnd.randbytes(1 << 20)
    copy = bytearray(buf)  # a copy, not the same object
    import ctypes
    shoal._populate(ctypes.cast(ctypes.c_char_p(buf), ctypes.c_void_p).value, len(buf))
    assert buf == copy
