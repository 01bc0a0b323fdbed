"""fsspec [P2]: the "shoal" filesystem agrees with fsspec's own "file" filesystem on the same tree
(ls, info, find, ranged cat_file, open with reads and seeks), read through a group; it is
registered by `import shoal`; pandas reads a CSV through shoal:// (pyarrow is not in Debian 12,
so no Parquet here)."""
import io
import os
import random

import fsspec
import pandas
import pytest

import shoal
from conftest import BLOCK, make_tree

MULTI = [("data/multi/m%d.bin" % i, BLOCK * (i + 1) + 77 * i) for i in range(3)]


@pytest.fixture
def fs_pair(harness, tmp_path):
    root = str(tmp_path / "store")
    objs = make_tree(root, MULTI)
    with open(os.path.join(root, "data", "table.csv"), "w") as f:
        f.write("id,name,value\n")
        for i in range(5000):
            f.write("%d,name %d,%f\n" % (i, i, i * 0.5))
    objs["data/table.csv"] = open(os.path.join(root, "data", "table.csv"), "rb").read()
    meta = "sqlite3://%s/meta.db" % harness.tmp
    harness.member("a", "file://" + root, "--meta", meta, "--cache-group", "g", "--block-size",
                   "256K")
    harness.wait_members(meta, "g", 1)
    opts = {"storage": "file://" + root, "meta": meta, "cache_group": "g", "block_size": "256K"}
    sfs = fsspec.filesystem("shoal", **opts)
    yield sfs, fsspec.filesystem("file"), root, objs, opts
    fsspec.AbstractFileSystem.clear_instance_cache()
    sfs.client.close()


def rel(root, name):
    name = name.rstrip("/")
    return os.path.relpath(name, root) if name.startswith("/") else name


def norm(entries, root):
    """(relative name, type, size of files) of fsspec listing entries."""
    return sorted((rel(root, e["name"]), e["type"], e["size"] if e["type"] == "file" else None)
                  for e in entries)


def test_registered_by_import():
    assert fsspec.get_filesystem_class("shoal") is shoal.ShoalFileSystem
    assert "shoal" in fsspec.registry


def test_agrees_with_the_file_filesystem(fs_pair):
    sfs, lfs, root, objs, _ = fs_pair
    dirs = sorted({os.path.dirname(k) for k in objs} | {""})
    for k in list(dirs):  # every ancestor folder too
        while k:
            k = os.path.dirname(k)
            dirs.append(k)
    for d in sorted(set(dirs)):
        mine = norm(sfs.ls(d, detail=True), root)
        theirs = norm(lfs.ls(os.path.join(root, d), detail=True), root)
        assert mine == theirs, d
        assert sorted(sfs.ls(d, detail=False)) == sorted(rel(root, n) for n in
                                                          lfs.ls(os.path.join(root, d),
                                                                 detail=False))
        if d:
            assert sfs.info(d)["type"] == lfs.info(os.path.join(root, d))["type"] == "directory"
            assert sfs.isdir(d) and not sfs.isfile(d)
        assert [rel(root, n) for n in lfs.find(os.path.join(root, d))] == sfs.find(d)
    assert sfs.find("") == sorted(objs)
    assert sfs.find("shoal://data") == [rel(root, n) for n in lfs.find(os.path.join(root,
                                                                                    "data"))]
    assert set(sfs.find("", detail=True)) == set(objs)

    rnd = random.Random(3)
    for key, data in sorted(objs.items()):
        path = os.path.join(root, key)
        mi, ti = sfs.info(key), lfs.info(path)
        assert (mi["type"], mi["size"]) == (ti["type"], ti["size"]) == ("file", len(data))
        assert abs(mi["mtime"] - ti["mtime"]) < 1e-3
        assert sfs.exists(key) and sfs.isfile(key) and sfs.size(key) == len(data)
        assert sfs.cat_file(key) == lfs.cat_file(path) == data
        for start, end in [(None, None), (0, 1), (5, None), (-7, None), (None, -3), (-20, -2),
                           (len(data) // 2, len(data) + 100), (len(data) + 5, None),
                           tuple(sorted((rnd.randrange(len(data) + 1),
                                         rnd.randrange(len(data) + 1))))]:
            try:
                expect = lfs.cat_file(path, start, end)
            except ValueError:  # the local filesystem refuses a range that ends before it starts
                expect = b""
            assert sfs.cat_file(key, start, end) == expect, (key, start, end)
        with sfs.open(key, "rb") as f, lfs.open(path, "rb") as g:
            assert f.size == len(data)
            for _ in range(5):
                pos = rnd.randrange(len(data) + 1)
                n = rnd.choice([1, 1000, BLOCK + 1])
                f.seek(pos)
                g.seek(pos)
                assert f.read(n) == g.read(n), (key, pos, n)
                assert f.tell() == g.tell()
            f.seek(0)
            assert f.read() == data
        if not set("*?[") & set(key):  # fsspec.open() globs such a URL, for "file://" too
            with fsspec.open("shoal://" + key, "rb", **fs_pair[4]) as f:
                assert f.read() == data
    for missing in ("nope", "data/nope.bin", "data/multi/m0.bin/x"):
        with pytest.raises(FileNotFoundError):
            sfs.info(missing)
        with pytest.raises(FileNotFoundError):
            sfs.cat_file(missing)
        with pytest.raises(FileNotFoundError):
            sfs.open(missing)
        assert not sfs.exists(missing)
    # "xb" creates only new objects (tests/python/test_fsspec_write.py: "wb" replaces), and
    # appending is no mode an object store has.
    with pytest.raises(FileExistsError, match="data/table.csv exists"):
        sfs.open("data/table.csv", "xb")
    with pytest.raises(NotImplementedError):
        sfs.open("data/table.csv", "ab")


def test_pandas_reads_csv_through_shoal(fs_pair):
    sfs, _, root, _, opts = fs_pair
    expect = pandas.read_csv(os.path.join(root, "data", "table.csv"))
    got = pandas.read_csv("shoal://data/table.csv", storage_options=opts)
    pandas.testing.assert_frame_equal(got, expect)
    assert len(got) == 5000
    # Text mode through fsspec's open, as other libraries use it.
    with fsspec.open("shoal://data/table.csv", "rt", **opts) as f:
        assert f.readline() == "id,name,value\n"
    with sfs.open("data/table.csv") as f:
        assert isinstance(f, io.IOBase)


def test_environment_defaults(fs_pair, monkeypatch):
    _, _, root, objs, opts = fs_pair
    monkeypatch.setenv("SHOAL_STORAGE", opts["storage"])
    monkeypatch.setenv("SHOAL_META", opts["meta"])
    monkeypatch.setenv("SHOAL_CACHE_GROUP", opts["cache_group"])
    fs = fsspec.filesystem("shoal", block_size="256K", skip_instance_cache=True)
    assert fs.cat_file("data/multi/m1.bin") == objs["data/multi/m1.bin"]
    fs.client.close()
    monkeypatch.delenv("SHOAL_STORAGE")
    with pytest.raises(ValueError, match="SHOAL_STORAGE"):
        fsspec.filesystem("shoal", skip_instance_cache=True)
