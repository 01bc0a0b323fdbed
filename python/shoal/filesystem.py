"""fsspec filesystem for the protocol "shoal": an object store read through a shoal cache group.

    import fsspec
    fs = fsspec.filesystem("shoal", storage="s3://bucket", meta="redis://h:6379/1",
                           cache_group="train", endpoint="http://h:9000")
    fs.ls("data")
    pandas.read_csv("shoal://data/table.csv",
                    storage_options={"storage": "s3://bucket", "cache_group": "train", ...})

Paths are object keys relative to the storage URL ("shoal://a/b.csv" is key "a/b.csv");
folders are key prefixes ending in "/", as in s3fs. Keyword arguments are shoal.Client's
settings; storage (and meta, cache_group) default to the environment variables SHOAL_STORAGE,
SHOAL_META and SHOAL_CACHE_GROUP, so that tools which take only a URL work too.
"""

import datetime
import errno
import numbers
import os
import threading
from concurrent.futures import ThreadPoolExecutor

from fsspec.dircache import DirCache
from fsspec.spec import AbstractBufferedFile, AbstractFileSystem

from . import BufferedWriteFile, Client, RawFile, WriteFile

_ENV_DEFAULTS = {"meta": "SHOAL_META", "cache_group": "SHOAL_CACHE_GROUP"}
# Paths of one cat/cat_ranges/get/rm read or deleted at once: the ctypes calls release the GIL,
# so the library's reads of different objects overlap (on its own threads and connections).
_CONCURRENCY = 16


def _pool_map(fn, items):
    """[fn(i) for i in items], run on up to _CONCURRENCY threads; raises the first error in
    the order of ITEMS."""
    items = list(items)
    if len(items) <= 1:
        return [fn(i) for i in items]
    with ThreadPoolExecutor(min(_CONCURRENCY, len(items))) as ex:
        return list(ex.map(fn, items))


class ShoalFileSystem(AbstractFileSystem):
    """fsspec filesystem over a shoal.Client, with s3fs's semantics: "wb" replaces an object
    (atomically: readers see the old or the new one), "xb" creates only a new one, rm deletes,
    cp_file copies inside the store where it can, transactions commit at their end."""

    protocol = "shoal"
    root_marker = ""

    def __init__(self, storage=None, **settings):
        super().__init__(storage=storage, **settings)
        storage = storage or os.environ.get("SHOAL_STORAGE")
        if not storage:
            raise ValueError("shoal: give storage= (file:///dir or s3://bucket) or set "
                             "SHOAL_STORAGE")
        for name, env in _ENV_DEFAULTS.items():
            if settings.get(name) is None and os.environ.get(env):
                settings[name] = os.environ[env]
        listing = dict(settings)
        # fsspec's own options are not client settings.
        for k in ("skip_instance_cache", "use_listings_cache", "listings_expiry_time",
                  "max_paths", "asynchronous", "loop"):
            settings.pop(k, None)
        self.client = Client(storage, **settings)
        # fsspec's listings cache (use_listings_cache, listings_expiry_time, max_paths), off
        # unless asked for: a cached listing does not see what other writers add.
        self.dircache = DirCache(use_listings_cache=bool(listing.get("use_listings_cache")),
                                 listings_expiry_time=listing.get("listings_expiry_time"),
                                 max_paths=listing.get("max_paths"))
        self._local = threading.local()  # get(): the files to fetch once the paths are known

    @classmethod
    def _strip_protocol(cls, path):
        if isinstance(path, list):
            return [cls._strip_protocol(p) for p in path]
        path = str(path)
        if path.startswith("shoal://"):
            path = path[len("shoal://"):]
        elif path.startswith("shoal::"):
            path = path[len("shoal::"):]
        return path.strip("/")

    def unstrip_protocol(self, name):
        return "shoal://" + name

    # ---- metadata

    @staticmethod
    def _file_info(key, size, mtime_ns, version):
        return {"name": key, "size": size, "type": "file", "mtime": mtime_ns / 1e9,
                "version": version}

    def ls(self, path, detail=True, refresh=False, **kwargs):
        path = self._strip_protocol(path)
        out = None
        if not refresh:
            try:
                out = self.dircache[path]
            except KeyError:
                pass
        if out is None:
            out = []
            for e in self.client.list(path + "/" if path else ""):
                if e.is_prefix:
                    out.append({"name": e.key.rstrip("/"), "size": 0, "type": "directory"})
                else:
                    out.append(self._file_info(e.key, e.size, e.mtime_ns, e.version))
            if out:
                self.dircache[path] = out
        if not out and path:
            # A file lists as itself, like fsspec's local filesystem; an empty folder lists as
            # nothing; nothing there is missing.
            info = self.info(path)
            out = [info] if info["type"] == "file" else []
        return out if detail else [o["name"] for o in out]

    def _stat_info(self, path):
        """PATH's info as an object, or None when it is not one."""
        try:
            st = self.client.stat(path)
            return self._file_info(path, st.size, st.mtime_ns, st.version)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None
        except OSError as e:
            if e.errno != errno.EINVAL:  # not a key this store has (a folder of file://)
                raise
            return None

    def info(self, path, **kwargs):
        path = self._strip_protocol(path)
        if not path:
            return {"name": "", "size": 0, "type": "directory"}
        info = self._stat_info(path)
        if info:
            return info
        if self.client.list(path + "/"):
            return {"name": path, "size": 0, "type": "directory"}
        # An empty folder (file://) is a prefix entry of its parent's listing only.
        parent = self._parent(path)
        if any(e.is_prefix and e.key == path + "/"
               for e in self.client.list(parent + "/" if parent else "")):
            return {"name": path, "size": 0, "type": "directory"}
        raise FileNotFoundError(errno.ENOENT, "no such object or folder", path)

    def find(self, path, maxdepth=None, withdirs=False, detail=False, **kwargs):
        path = self._strip_protocol(path)
        if maxdepth is not None or withdirs:
            return super().find(path, maxdepth=maxdepth, withdirs=withdirs, detail=detail,
                                **kwargs)
        # One recursive listing instead of a walk of every folder.
        out = {e.key: self._file_info(e.key, e.size, e.mtime_ns, e.version)
               for e in self.client.list(path + "/" if path else "", recursive=True)
               if not e.is_prefix}
        if not out and path:
            info = self._stat_info(path)
            if info:
                out[path] = info
        names = sorted(out)
        return {n: out[n] for n in names} if detail else names

    def modified(self, path):
        info = self.info(path)
        if info["type"] != "file":
            raise IsADirectoryError(errno.EISDIR, "a folder has no modification time", path)
        return datetime.datetime.fromtimestamp(info["mtime"], tz=datetime.timezone.utc)

    def created(self, path):
        """An object is never changed in place, only replaced: it was created when it was
        last modified."""
        return self.modified(path)

    def ukey(self, path):
        return self.info(path).get("version") or super().ukey(path)

    def checksum(self, path):
        return int.from_bytes(self.ukey(path).encode()[-8:].rjust(8, b"\0"), "big")

    def invalidate_cache(self, path=None):
        """Forgets the cached listings of PATH and its parents (all of them without PATH)."""
        if path is None:
            self.dircache.clear()
            return
        path = self._strip_protocol(path)
        while True:
            self.dircache.pop(path, None)
            if not path:
                break
            path = self._parent(path)

    # ---- folders: prefixes of keys, as in S3; they exist while an object is under them

    def mkdir(self, path, create_parents=True, **kwargs):
        path = self._strip_protocol(path)
        if self._stat_info(path):
            raise FileExistsError(errno.EEXIST, "an object has this name", path)

    def makedirs(self, path, exist_ok=False):
        path = self._strip_protocol(path)
        if not exist_ok and path and self.exists(path):
            raise FileExistsError(errno.EEXIST, "exists (exist_ok=True accepts that)", path)
        if self._stat_info(path):
            raise FileExistsError(errno.EEXIST, "an object has this name", path)

    def rmdir(self, path):
        path = self._strip_protocol(path)
        if self.client.list(path + "/"):
            raise OSError(errno.ENOTEMPTY, "folder not empty", path)

    # ---- deleting and copying

    def rm_file(self, path):
        path = self._strip_protocol(path)
        self.client.delete(path)
        self.invalidate_cache(self._parent(path))

    def _rm(self, path):
        self.rm_file(path)

    def rm(self, path, recursive=False, maxdepth=None):
        paths = self.expand_path(path, recursive=recursive, maxdepth=maxdepth)
        if not recursive:
            for p in paths:
                if not self._stat_info(p) and self.isdir(p):
                    raise IsADirectoryError(errno.EISDIR, "a folder: rm(recursive=True) "
                                            "deletes what is in it", p)
        # Folders vanish with the last object under them: deleting one's name finds nothing
        # (file://) or nothing but an object of that name (S3 has "a" and "a/b" side by side).
        folders = {self._parent(p) for p in paths}

        def one(p):
            try:
                self.client.delete(p)
            except FileNotFoundError:
                if p in folders or (recursive and self.isdir(p)):  # an empty folder too
                    return
                raise
        _pool_map(one, paths)
        self.invalidate_cache()

    def cp_file(self, path1, path2, **kwargs):
        path1, path2 = self._strip_protocol(path1), self._strip_protocol(path2)
        try:
            self.client.copy(path1, path2, overwrite=True)
        except (FileNotFoundError, IsADirectoryError, OSError) as e:
            if isinstance(e, FileExistsError) or not self.isdir(path1):
                raise
            return  # a folder: its objects are copied by name, it has nothing of its own
        self.invalidate_cache(self._parent(path2))

    # ---- data

    def _open_raw(self, path):
        try:
            return RawFile(self.client, path)
        except OSError as e:
            if e.errno in (errno.ENOENT, errno.EINVAL, errno.EISDIR) and path and \
                    self.isdir(path):
                raise IsADirectoryError(errno.EISDIR, "a folder, not an object", path) from None
            raise

    def cat_file(self, path, start=None, end=None, **kwargs):
        path = self._strip_protocol(path)
        raw = self._open_raw(path)
        try:
            size = raw.size
            start = 0 if start is None else (max(0, size + start) if start < 0 else start)
            end = size if end is None else (max(0, size + end) if end < 0 else min(end, size))
            if end <= start:
                return b""
            return raw.pread(end - start, start)  # one copy, into the bytes returned
        finally:
            raw.close()

    def cat(self, path, recursive=False, on_error="raise", **kwargs):
        paths = self.expand_path(path, recursive=recursive)
        if len(paths) > 1 or isinstance(path, list) or paths[0] != self._strip_protocol(path):
            def one(p):
                try:
                    return self.cat_file(p, **kwargs)
                except Exception as e:  # noqa: BLE001 — handed back as on_error says
                    if on_error == "raise":
                        raise
                    return e
            out = {}
            for p, r in zip(paths, _pool_map(one, paths)):
                if not (on_error == "omit" and isinstance(r, Exception)):
                    out[p] = r
            return out
        return self.cat_file(paths[0], **kwargs)

    def cat_ranges(self, paths, starts, ends, max_gap=None, on_error="return", **kwargs):
        if max_gap is not None:
            raise NotImplementedError
        if not isinstance(paths, list):
            raise TypeError
        if not isinstance(starts, list):
            starts = [starts] * len(paths)
        if not isinstance(ends, list):
            ends = [ends] * len(paths)
        if len(starts) != len(paths) or len(ends) != len(paths):
            raise ValueError

        def one(a):
            try:
                return self.cat_file(*a)
            except Exception as e:  # noqa: BLE001
                if on_error != "return":
                    raise
                return e
        return _pool_map(one, zip(paths, starts, ends))

    def get(self, rpath, lpath, recursive=False, **kwargs):
        # fsspec's get works out the pairs of paths and calls get_file for each; they are
        # collected here and fetched concurrently once all are known.
        batch = self._local.batch = []
        try:
            super().get(rpath, lpath, recursive=recursive, **kwargs)
        finally:
            self._local.batch = None
        _pool_map(lambda a: self._get_one(*a), batch)

    def get_file(self, rpath, lpath, callback=None, outfile=None, **kwargs):
        batch = getattr(self._local, "batch", None)
        if batch is not None and outfile is None and isinstance(lpath, (str, os.PathLike)):
            batch.append((rpath, lpath))
            return None
        if outfile is None and not isinstance(lpath, (str, os.PathLike)):
            outfile = lpath  # a file-like object
        return self._get_one(rpath, lpath, outfile)

    def _get_one(self, rpath, lpath, outfile=None):
        path = self._strip_protocol(rpath)
        try:
            raw = self._open_raw(path) if path else None
        except IsADirectoryError:
            raw = None
        if raw is None:
            if outfile is None:
                os.makedirs(lpath, exist_ok=True)
            return
        try:
            if outfile is not None:
                self._copy_out(raw, outfile)
                return
            parent = os.path.dirname(os.fspath(lpath))
            if parent:
                os.makedirs(parent, exist_ok=True)
            with open(lpath, "wb") as out:
                self._copy_out(raw, out)
        finally:
            raw.close()

    @staticmethod
    def _copy_out(raw, out):
        buf = bytearray(min(max(raw.size, 1), 8 << 20))
        view = memoryview(buf)
        while True:
            n = raw.readinto(view)
            if not n:
                break
            out.write(view[:n])

    def _open(self, path, mode="rb", block_size=None, autocommit=True, cache_options=None,
              **kwargs):
        path = self._strip_protocol(path)
        if mode in ("wb", "xb"):
            return self._open_write(path, mode, autocommit, kwargs)
        if mode != "rb":
            raise NotImplementedError("shoal: objects open for reading ('rb') or writing "
                                      "('wb' replaces, 'xb' creates)")
        return ShoalFile(self, path, mode, block_size, autocommit, cache_options=cache_options,
                         **kwargs)

    def _open_write(self, path, mode, autocommit, kwargs):
        """A writer of PATH: "wb" replaces an object there, "xb" (or overwrite=False) refuses
        to. The new object replaces the old one in one step when it is committed."""
        if not path:
            raise IsADirectoryError(errno.EISDIR, "the root is a folder", path)
        overwrite = mode == "wb" and kwargs.get("overwrite", True)
        try:
            raw = WriteFile(self.client, path, overwrite=overwrite,
                            exists_hint="mode 'wb' replaces it")
        except FileExistsError:
            raise
        except OSError as e:
            raise self._write_error(path, e) from None
        self.invalidate_cache(self._parent(path))
        return ShoalWriteFile(self, path, raw, autocommit)

    def _write_error(self, path, e):
        """The Python error for a writer of PATH that the store refused with E: a folder of
        that name, or an object where a folder of the path should be."""
        if self.isdir(path):
            return IsADirectoryError(errno.EISDIR, "a folder has this name", path)
        parent = self._parent(path)
        while parent:
            if self._stat_info(parent):
                return NotADirectoryError(errno.ENOTDIR, "%s is an object, not a folder"
                                          % parent, path)
            parent = self._parent(parent)
        return e


class ShoalWriteFile(BufferedWriteFile):
    """A writer from fsspec's open(mode="wb"/"xb"): committed at close, or, inside
    `with fs.transaction:` (autocommit False), by commit() at the end of the block, and dropped
    by discard() when the block is left by an exception."""

    def __init__(self, fs, path, raw, autocommit=True, buffer_size=4 << 20):
        super().__init__(raw, buffer_size=buffer_size)
        self.fs, self.path, self.autocommit = fs, path, autocommit
        self.mode = "wb"

    def close(self):
        if self.closed:
            return
        if self.autocommit:
            try:
                super().close()
            except OSError as e:
                if isinstance(e, FileExistsError):
                    raise
                raise self.fs._write_error(self.path, e) from None
            return
        # In a transaction: the bytes go up now, the commit waits for commit().
        try:
            if not self.raw._aborted:
                self.flush()
        except BaseException:
            self.raw.abort()
            raise
        finally:
            io_close(self)

    def commit(self):
        """Makes the object appear (the end of a transaction)."""
        if not self.closed:
            self.flush()
            io_close(self)
        if not self.raw.closed:
            self.raw.close()
        self.fs.invalidate_cache(self.fs._parent(self.path))

    def discard(self):
        """Drops the object: nothing is written under the key."""
        self.abort()
        if not self.closed:
            io_close(self)
        self.raw.close()

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            self.abort()
        self.close()
        return False


def io_close(f):
    """Marks F closed without what BufferedWriteFile.close does to its raw file."""
    import io
    io.BufferedIOBase.close(f)


class ShoalFile(AbstractBufferedFile):
    """fsspec's buffered file over one shoal object; the version seen at open is read until
    close."""

    DEFAULT_BLOCK_SIZE = 4 << 20

    def __init__(self, fs, path, mode="rb", block_size=None, autocommit=True,
                 cache_type="readahead", cache_options=None, **kwargs):
        self._raw = fs._open_raw(fs._strip_protocol(path))
        kwargs["size"] = self._raw.size
        self._details = fs._file_info(self._raw.name, self._raw.size, self._raw.mtime_ns,
                                      self._raw.version)
        super().__init__(fs, path, mode, block_size, autocommit, cache_type=cache_type,
                         cache_options=cache_options, **kwargs)

    def _fetch_range(self, start, end):
        return self._raw.pread(end - start, start)

    def seek(self, loc, whence=0):
        if not isinstance(loc, numbers.Integral):
            raise TypeError("an integer is required (got type %s)" % type(loc).__name__)
        return super().seek(int(loc), whence)

    def read(self, length=-1):
        if length is None:
            length = -1
        if self.closed:
            raise ValueError("I/O operation on closed file")
        if length < 0:
            length = self.size - self.loc
        if length >= self.blocksize and self.loc < self.size:
            # A large read goes straight into the bytes returned (one copy), not through the
            # readahead buffer and a slice of it.
            out = self._raw.pread(length, self.loc)
            self.loc += len(out)
            return out
        return super().read(length)

    def close(self):
        super().close()
        if self._raw is not None:
            self._raw.close()
