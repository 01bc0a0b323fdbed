"""shoal:// as an s3fs user expects it (docs/python.md), in store mode and through a 2-member
group: delete (Client.delete, rm_file, rm recursive) and what the group serves afterwards; copy
(Client.copy, cp_file, mv) inside the store for s3:// (no GET here; in a group its blocks are
written through) and through the client for file://; "wb" replaces atomically, "xb" is exclusive with a message; transactions commit at the
end of the block and discard on an error; Python's errors for folders and files; folders,
created/modified, seek and read(None); cat, cat_ranges and get of many paths on several threads;
pandas to_csv over an existing key."""
import errno
import os
import random
import threading

import fsspec
import pandas
import pytest

import shoal
from conftest import BLOCK


def start_group(harness, storage, member_flags=()):
    meta = "sqlite3://%s/meta.db" % harness.tmp
    for m in ("a", "b"):
        harness.member(m, storage, "--meta", meta, "--cache-group", "fw", "--block-size", "256K",
                       *member_flags)
    harness.wait_members(meta, "fw", 2)
    return {"meta": meta, "cache_group": "fw", "block_size": "256K"}


@pytest.fixture(params=["store", "group"])
def sfs(request, harness, tmp_path):
    root = str(tmp_path / "store")
    os.makedirs(root)
    opts = {"storage": "file://" + root}
    if request.param == "group":
        opts.update(start_group(harness, "file://" + root))
    fs = fsspec.filesystem("shoal", skip_instance_cache=True, **opts)
    fs.root = root
    fs.mode = request.param
    yield fs
    fs.client.close()


def test_delete(sfs):
    sfs.pipe_file("d/a.bin", b"a" * 1000)
    sfs.pipe_file("d/sub/b.bin", b"b" * 10)
    sfs.pipe_file("d/sub/c.bin", b"c")
    sfs.rm_file("d/a.bin")
    assert not sfs.exists("d/a.bin")
    assert not os.path.exists(os.path.join(sfs.root, "d", "a.bin"))
    with pytest.raises(FileNotFoundError):
        sfs.client.delete("d/a.bin")  # file:// tells a missing object apart
    with pytest.raises(IsADirectoryError, match="recursive=True"):
        sfs.rm("d/sub")
    sfs.rm("d", recursive=True)
    assert not sfs.exists("d/sub/b.bin") and not sfs.exists("d")
    assert sfs.ls("") == []


def test_deleted_object_is_never_served_as_a_new_one(sfs):
    """Blocks are keyed by version; an object deleted and written again with the same size gets
    a new version (file:// stamps a fine mtime at commit), so the group's cached blocks of the old
    one are never read for it."""
    rnd = random.Random(3)
    for i in range(5):
        old = rnd.randbytes(2 * BLOCK + 5)
        new = rnd.randbytes(len(old))
        sfs.pipe_file("v.bin", old)
        assert sfs.cat_file("v.bin") == old  # cached now (group mode: in the owners)
        v_old = sfs.info("v.bin")["version"]
        sfs.rm_file("v.bin")
        sfs.pipe_file("v.bin", new)
        assert sfs.info("v.bin")["version"] != v_old
        assert sfs.cat_file("v.bin") == new, i
        sfs.pipe_file("v.bin", old)  # replaced in place, the same size again
        assert sfs.cat_file("v.bin") == old, i


def test_copy_and_move(sfs):
    data = random.Random(5).randbytes(3 * BLOCK + 17)
    sfs.pipe_file("src/x.bin", data)
    sfs.cp_file("src/x.bin", "dst/y.bin")
    assert sfs.cat_file("dst/y.bin") == data
    sfs.pipe_file("dst/y.bin", b"old")
    sfs.cp_file("src/x.bin", "dst/y.bin")  # fsspec's cp_file replaces
    assert sfs.cat_file("dst/y.bin") == data
    with pytest.raises(FileExistsError, match="dst/y.bin exists"):
        sfs.client.copy("src/x.bin", "dst/y.bin")
    with pytest.raises(FileNotFoundError):
        sfs.cp_file("src/none", "dst/none")
    sfs.copy("src", "tree", recursive=True)
    assert sfs.cat_file("tree/x.bin") == data
    sfs.mv("dst/y.bin", "moved.bin")
    assert not sfs.exists("dst/y.bin") and sfs.cat_file("moved.bin") == data


def test_copy_inside_s3(harness, s3rver):
    """CopyObject: the bytes never pass through the client (no GET here)."""
    endpoint, bucket, _ = s3rver
    fs = fsspec.filesystem("shoal", storage="s3://" + bucket, endpoint=endpoint,
                           skip_instance_cache=True)
    data = random.Random(6).randbytes(BLOCK + 3)
    fs.pipe_file("s/a.bin", data)
    gets = shoal.counter("object_get_requests")
    fs.cp_file("s/a.bin", "s/b.bin")
    assert shoal.counter("object_get_requests") == gets
    assert fs.cat_file("s/b.bin") == data
    fs.rm("s", recursive=True)
    assert not fs.exists("s/a.bin") and not fs.exists("s/b.bin")
    fs.client.close()


def test_copy_inside_s3_is_written_through_the_group(harness, s3rver):
    """An in-store copy's blocks go to their owners (read from the group, where the source is):
    reading the copy then makes no store GET, here or in the group."""
    endpoint, bucket, _ = s3rver
    opts = start_group(harness, "s3://" + bucket, ("--endpoint", endpoint))
    fs = fsspec.filesystem("shoal", storage="s3://" + bucket, endpoint=endpoint,
                           skip_instance_cache=True, **opts)
    data = random.Random(9).randbytes(5 * BLOCK + 7)  # 6 blocks
    fs.pipe_file("g/a.bin", data)  # written through: the source's blocks are in the group
    served = sum(harness.metrics(m).get("remotecache_put_serve_blocks", 0) for m in "ab")
    gets = shoal.counter("object_get_requests")
    fs.cp_file("g/a.bin", "g/b.bin")
    assert fs.cat_file("g/b.bin") == data
    assert shoal.counter("object_get_requests") == gets
    assert sum(harness.metrics(m).get("object_get_requests", 0) for m in "ab") == 0
    assert sum(harness.metrics(m).get("remotecache_put_serve_blocks", 0)
               for m in "ab") == served + 6
    fs.client.close()


def test_wb_replaces_atomically_and_xb_is_exclusive(sfs):
    n = BLOCK + 999
    sfs.pipe_file("r.bin", b"\0" * n)
    stop = threading.Event()
    bad = []

    def reader():
        while not stop.is_set():
            try:
                got = sfs.cat_file("r.bin")
            except OSError as e:  # the object was replaced while read: ESTALE, never a mix
                if e.errno != errno.ESTALE:
                    bad.append(repr(e))
                continue
            if len(got) != n or got.count(got[:1]) != n:
                bad.append("a mix of versions or a short object")
    t = threading.Thread(target=reader)
    t.start()
    try:
        for i in range(1, 20):
            with sfs.open("r.bin", "wb") as f:
                f.write(bytes([i]) * n)
    finally:
        stop.set()
        t.join()
    assert not bad, bad[:3]
    assert sfs.cat_file("r.bin") == bytes([19]) * n
    with pytest.raises(FileExistsError) as e:
        sfs.open("r.bin", "xb")
    assert "r.bin exists" in str(e.value) and "SHOAL_" not in str(e.value)
    with sfs.open("new.bin", "xb") as f:
        f.write(b"x")
    assert sfs.cat_file("new.bin") == b"x"


def test_transactions(sfs):
    with sfs.transaction:
        with sfs.open("t/a", "wb") as f:
            f.write(b"a")
        f2 = sfs.open("t/b", "wb")
        f2.write(b"b")  # never closed: committed by the transaction
        assert not sfs.exists("t/a") and not sfs.exists("t/b")
    assert sfs.cat_file("t/a") == b"a" and sfs.cat_file("t/b") == b"b"
    assert not sfs._intrans
    with pytest.raises(RuntimeError):
        with sfs.transaction:
            sfs.pipe_file("t/c", b"c")
            with sfs.open("t/a", "wb") as f:
                f.write(b"replaced")
            raise RuntimeError("boom")
    assert not sfs.exists("t/c") and sfs.cat_file("t/a") == b"a"
    assert not sfs._intrans
    sfs.pipe_file("t/d", b"d")  # autocommit again after the transaction
    assert sfs.cat_file("t/d") == b"d"


def test_errors_and_folders(sfs):
    sfs.pipe_file("f/obj", b"0123456789")
    os.makedirs(os.path.join(sfs.root, "empty"))
    assert sfs.info("empty") == {"name": "empty", "size": 0, "type": "directory"}
    assert sfs.isdir("empty") and sfs.ls("empty") == []
    with pytest.raises(IsADirectoryError):
        sfs.cat_file("f")
    with pytest.raises(IsADirectoryError):
        sfs.open("f/")
    with pytest.raises(IsADirectoryError):
        sfs.pipe_file("f", b"x")
    with pytest.raises(NotADirectoryError):
        sfs.pipe_file("f/obj/under", b"x")
    with pytest.raises(FileExistsError):
        sfs.makedirs("f", exist_ok=False)
    sfs.makedirs("f", exist_ok=True)
    sfs.makedirs("brand/new", exist_ok=False)
    assert sfs.created("f/obj") == sfs.modified("f/obj")
    assert abs(sfs.modified("f/obj").timestamp() - os.path.getmtime(
        os.path.join(sfs.root, "f", "obj"))) < 1e-3
    with sfs.open("f/obj", "rb") as f:
        with pytest.raises(TypeError):
            f.seek(1.5)
        f.seek(2)
        assert f.read(None) == b"23456789"
        f.seek(0)
        assert f.read() == b"0123456789"


def test_many_paths_run_concurrently(sfs, monkeypatch):
    rnd = random.Random(8)
    objs = {"many/%03d" % i: rnd.randbytes(rnd.randrange(1, 3 * BLOCK)) for i in range(48)}
    for k, v in objs.items():
        sfs.pipe_file(k, v)
    threads = set()
    cat_file = type(sfs).cat_file

    def spy(self, path, *a, **kw):
        threads.add(threading.get_ident())
        return cat_file(self, path, *a, **kw)
    monkeypatch.setattr(type(sfs), "cat_file", spy)
    assert sfs.cat(sorted(objs)) == objs
    assert len(threads) > 1
    threads.clear()
    keys = sorted(objs)
    got = sfs.cat_ranges(keys + ["many/none"], [5] * 49, [100] * 49)
    assert got[:48] == [objs[k][5:100] for k in keys]
    assert isinstance(got[48], FileNotFoundError)
    assert len(threads) > 1
    monkeypatch.undo()
    out = os.path.join(sfs.root + ".get")
    sfs.get("many", out, recursive=True)
    for k, v in objs.items():
        with open(os.path.join(out, os.path.basename(k)), "rb") as f:
            assert f.read() == v


def test_pandas_to_csv_twice(sfs):
    opts = dict(sfs.storage_options)
    opts.pop("skip_instance_cache", None)
    first = pandas.DataFrame({"a": [1, 2, 3]})
    second = pandas.DataFrame({"b": ["x", "y"]})
    first.to_csv("shoal://out/t.csv", index=False, storage_options=opts)
    second.to_csv("shoal://out/t.csv", index=False, storage_options=opts)
    got = pandas.read_csv("shoal://out/t.csv", storage_options=opts)
    pandas.testing.assert_frame_equal(got, second)
    fsspec.AbstractFileSystem.clear_instance_cache()


def test_listings_cache(tmp_path):
    """Off by default (other writers' objects show at once); fsspec's options turn it on, and
    this filesystem's own writes and deletes drop the listings they change."""
    root = str(tmp_path / "store")
    os.makedirs(os.path.join(root, "l"))
    with open(os.path.join(root, "l", "a"), "wb") as f:
        f.write(b"a")
    plain = fsspec.filesystem("shoal", storage="file://" + root, skip_instance_cache=True)
    cached = fsspec.filesystem("shoal", storage="file://" + root, skip_instance_cache=True,
                               use_listings_cache=True, listings_expiry_time=3600)
    assert plain.ls("l", detail=False) == ["l/a"] == cached.ls("l", detail=False)
    with open(os.path.join(root, "l", "b"), "wb") as f:  # another writer
        f.write(b"b")
    assert plain.ls("l", detail=False) == ["l/a", "l/b"]
    assert cached.ls("l", detail=False) == ["l/a"]  # from the cache
    assert cached.ls("l", detail=False, refresh=True) == ["l/a", "l/b"]
    cached.pipe_file("l/c", b"c")
    assert cached.ls("l", detail=False) == ["l/a", "l/b", "l/c"]
    cached.rm_file("l/a")
    assert cached.ls("l", detail=False) == ["l/b", "l/c"]
    with cached.transaction:
        cached.pipe_file("l/d", b"d")
    assert cached.ls("l", detail=False) == ["l/b", "l/c", "l/d"]
    plain.client.close()
    cached.client.close()
