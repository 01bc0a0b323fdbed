"""Writes from Python [W1, W3] (docs/python.md): Client.open(key, "wb") creates an object that is
byte-exact in the store when close() returns, over file:// and s3:// (s3rver); in a 2-member
group its blocks are in the owners' caches by then, so reading it back makes no store GET,
neither here nor in the group; an existing key raises FileExistsError unless overwrite=True; a
`with` block left by an exception writes nothing; fsspec's open(mode="wb") writes the same way;
and the C API's errors arrive as OSError with the library's message."""
import errno
import io
import os
import random

import fsspec
import numpy
import pytest

import shoal
from conftest import BLOCK


def group(harness, storage, member_flags=()):
    meta = "sqlite3://%s/meta.db" % harness.tmp
    for m in ("a", "b"):
        harness.member(m, storage, "--meta", meta, "--cache-group", "w", "--block-size", "256K",
                       *member_flags)
    harness.wait_members(meta, "w", 2)
    return meta


def counters(*names):
    return {n: shoal.counter(n) for n in names}


def write_through(harness, storage, settings, member_flags=(), store_root=None):
    meta = group(harness, storage, member_flags)
    rnd = random.Random(7)
    data = rnd.randbytes(12 * BLOCK + 4321)  # 13 blocks, the last one short
    nblocks = 13
    before = counters("remotecache_put_requests", "remotecache_put_bytes",
                      "remotecache_put_errors", "object_get_requests")
    with shoal.Client(storage, meta=meta, cache_group="w", block_size="256K", **settings) as c:
        with c.open("out/ckpt.bin", "wb") as f:
            assert f.writable() and isinstance(f.raw, shoal.WriteFile)
            for i in range(0, len(data), 100000):
                f.write(data[i:i + 100000])
            f.write(memoryview(bytearray(b"")))  # an empty write is fine
        after = counters("remotecache_put_requests", "remotecache_put_bytes",
                         "remotecache_put_errors")
        assert after["remotecache_put_requests"] - before["remotecache_put_requests"] == nblocks
        assert after["remotecache_put_bytes"] - before["remotecache_put_bytes"] == len(data)
        assert after["remotecache_put_errors"] == before["remotecache_put_errors"]
        if store_root:
            with open(os.path.join(store_root, "out/ckpt.bin"), "rb") as g:
                assert g.read() == data
        served = sum(harness.metrics(m).get("remotecache_put_serve_blocks", 0) for m in "ab")
        assert served == nblocks
        # Read back through the group: no store GET here, none in the group either.
        assert c.read("out/ckpt.bin") == data
        assert c.stat("out/ckpt.bin").size == len(data)
    assert shoal.counter("object_get_requests") == before["object_get_requests"]
    assert sum(harness.metrics(m).get("object_get_requests", 0) for m in "ab") == 0


def test_write_through_file_store(harness, tmp_path):
    root = str(tmp_path / "store")
    os.makedirs(root)
    write_through(harness, "file://" + root, {}, store_root=root)


def test_write_through_s3_store(harness, s3rver):
    endpoint, bucket, _ = s3rver
    write_through(harness, "s3://" + bucket, {"endpoint": endpoint},
                  member_flags=("--endpoint", endpoint))


def test_write_semantics(tmp_path):
    root = str(tmp_path / "store")
    os.makedirs(root)
    with shoal.Client("file://" + root) as c:
        with c.open("a.txt", "wb") as f:
            f.write(b"first")
        assert open(os.path.join(root, "a.txt"), "rb").read() == b"first"
        with pytest.raises(FileExistsError, match="exists"):
            c.open("a.txt", "wb")
        with pytest.raises(FileExistsError):
            c.open("a.txt", "xb", overwrite=True)  # "xb" never replaces
        with c.open("a.txt", "wb", overwrite=True) as f:
            f.write(b"second")
        assert c.read("a.txt") == b"second"
        # An exception inside the block drops the upload: nothing under the key.
        with pytest.raises(RuntimeError):
            with c.open("b.bin", "wb") as f:
                f.write(os.urandom(300000))
                raise RuntimeError("the job failed")
        assert not os.path.exists(os.path.join(root, "b.bin"))
        with pytest.raises(FileNotFoundError):
            c.stat("b.bin")
        # numpy.save writes through the file's write(): the buffered writer is no OS file.
        arr = numpy.arange(300000, dtype=numpy.float64)
        with c.open("arr.npy", "wb") as f:
            numpy.save(f, arr)
        assert (numpy.load(io.BytesIO(c.read("arr.npy"))) == arr).all()
        # Unbuffered: the raw writer; writes go straight to the library.
        raw = c.open("c.bin", "wb", buffering=0)
        assert isinstance(raw, shoal.WriteFile)
        assert raw.write(b"x" * 10) == 10 and raw.tell() == 10
        raw.close()
        assert c.read("c.bin") == b"x" * 10
        with pytest.raises(ValueError):
            raw.write(b"more")
        # Keys the store cannot take, and modes the library does not have.
        with pytest.raises(OSError) as e:
            c.open("bad\nkey", "wb")
        assert e.value.errno == errno.EINVAL and "key" in str(e.value)
        with pytest.raises(ValueError):
            c.open("d.bin", "ab")
        # A client with a writer open cannot close.
        w = c.open("e.bin", "wb")
        w.write(b"e")
        with pytest.raises(OSError) as e:
            c.close()
        assert e.value.errno == errno.EBUSY
        w.close()
        assert c.read("e.bin") == b"e"


def test_fsspec_write(tmp_path):
    root = str(tmp_path / "store")
    os.makedirs(root)
    fs = fsspec.filesystem("shoal", storage="file://" + root)
    with fs.open("dir/f.bin", "wb") as f:
        f.write(b"hello " * 1000)
    assert fs.cat("dir/f.bin") == b"hello " * 1000
    assert fs.exists("dir/f.bin") and fs.info("dir/f.bin")["size"] == 6000
    with pytest.raises(FileExistsError, match="dir/f.bin exists"):
        fs.open("dir/f.bin", "xb")
    with fs.open("dir/f.bin", "wb") as f:  # as in s3fs: "wb" replaces
        f.write(b"bye")
    assert fs.cat("dir/f.bin") == b"bye"
    with pytest.raises(NotImplementedError):
        fs.open("dir/f.bin", "ab")
