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
import os

from fsspec.spec import AbstractBufferedFile, AbstractFileSystem

from . import Client, RawFile

_ENV_DEFAULTS = {"meta": "SHOAL_META", "cache_group": "SHOAL_CACHE_GROUP"}


class ShoalFileSystem(AbstractFileSystem):
    """Read-only fsspec filesystem over a shoal.Client."""

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
        # fsspec's own options are not client settings.
        for k in ("skip_instance_cache", "use_listings_cache", "listings_expiry_time",
                  "max_paths", "asynchronous", "loop"):
            settings.pop(k, None)
        self.client = Client(storage, **settings)

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

    def ls(self, path, detail=True, **kwargs):
        path = self._strip_protocol(path)
        entries = self.client.list(path + "/" if path else "")
        out = []
        for e in entries:
            if e.is_prefix:
                out.append({"name": e.key.rstrip("/"), "size": 0, "type": "directory"})
            else:
                out.append(self._file_info(e.key, e.size, e.mtime_ns, e.version))
        if not out and path:
            # A file lists as itself, like fsspec's local filesystem; nothing there is missing.
            out = [self.info(path)]
        return out if detail else [o["name"] for o in out]

    def info(self, path, **kwargs):
        path = self._strip_protocol(path)
        if not path:
            return {"name": "", "size": 0, "type": "directory"}
        try:
            st = self.client.stat(path)
            return self._file_info(path, st.size, st.mtime_ns, st.version)
        except (FileNotFoundError, IsADirectoryError):
            pass
        except OSError as e:
            if e.errno != 22:  # EINVAL: not a key this store has (a folder of file://)
                raise
        if self.client.list(path + "/"):
            return {"name": path, "size": 0, "type": "directory"}
        raise FileNotFoundError(path)

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
            try:
                info = self.info(path)
                if info["type"] == "file":
                    out[path] = info
            except FileNotFoundError:
                pass
        names = sorted(out)
        return {n: out[n] for n in names} if detail else names

    def modified(self, path):
        info = self.info(path)
        if info["type"] != "file":
            raise IsADirectoryError(path)
        return datetime.datetime.fromtimestamp(info["mtime"], tz=datetime.timezone.utc)

    def ukey(self, path):
        return self.info(path).get("version") or super().ukey(path)

    def checksum(self, path):
        return int.from_bytes(self.ukey(path).encode()[-8:].rjust(8, b"\0"), "big")

    # ---- data

    def cat_file(self, path, start=None, end=None, **kwargs):
        path = self._strip_protocol(path)
        raw = RawFile(self.client, path)
        try:
            size = raw.size
            start = 0 if start is None else (max(0, size + start) if start < 0 else start)
            end = size if end is None else (size + end if end < 0 else min(end, size))
            if end <= start:
                return b""
            buf = bytearray(end - start)
            raw.seek(start)
            view, got = memoryview(buf), 0
            while got < len(buf):
                n = raw.readinto(view[got:])
                if not n:
                    break
                got += n
            del view
            del buf[got:]
            return bytes(buf)
        finally:
            raw.close()

    def _open(self, path, mode="rb", block_size=None, autocommit=True, cache_options=None,
              **kwargs):
        if mode in ("wb", "xb"):
            # A new object, written sequentially and committed at close (docs/writes.md);
            # overwrite=True replaces an existing one.
            self.invalidate_cache(self._parent(path))
            return self.client.open(self._strip_protocol(path), mode,
                                    overwrite=bool(kwargs.get("overwrite")))
        if mode != "rb":
            raise NotImplementedError("shoal: objects open for reading ('rb') or writing "
                                      "('wb', 'xb')")
        return ShoalFile(self, path, mode, block_size, autocommit, cache_options=cache_options,
                         **kwargs)


class ShoalFile(AbstractBufferedFile):
    """fsspec's buffered file over one shoal object; the version seen at open is read until
    close."""

    DEFAULT_BLOCK_SIZE = 4 << 20

    def __init__(self, fs, path, mode="rb", block_size=None, autocommit=True,
                 cache_type="readahead", cache_options=None, **kwargs):
        self._raw = RawFile(fs.client, fs._strip_protocol(path))
        kwargs["size"] = self._raw.size
        self._details = fs._file_info(self._raw.name, self._raw.size, self._raw.mtime_ns,
                                      self._raw.version)
        super().__init__(fs, path, mode, block_size, autocommit, cache_type=cache_type,
                         cache_options=cache_options, **kwargs)

    def _fetch_range(self, start, end):
        return self._raw.pread(end - start, start)

    def close(self):
        super().close()
        if self._raw is not None:
            self._raw.close()
