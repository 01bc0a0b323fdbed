"""Read objects through a shoal cache group from Python, without FUSE.

    import shoal
    c = shoal.Client("s3://bucket", meta="redis://10.0.0.1:6379/1", cache_group="train",
                     endpoint="http://10.0.0.2:9000")
    data = c.read("shards/000.tar", 0, 1 << 20)          # bytes
    n = c.readinto("shards/000.tar", 0, numpy_array)     # into any writable buffer, no extra copy
    with c.open("shards/000.tar") as f:                  # a seekable binary file
        header = f.read(512)

An fsspec filesystem for the protocol "shoal" is registered when fsspec is installed
(shoal.filesystem.ShoalFileSystem). See docs/python.md.
"""

import ctypes
import errno as _errno
import io
import numbers
import os
from collections import namedtuple

from . import _lib
from ._lib import lib

__all__ = ["Client", "ObjectInfo", "Entry", "RawFile", "WriteFile", "BufferedWriteFile",
           "counter", "library_version", "ShoalFileSystem"]
__version__ = "0.1.0"

ObjectInfo = namedtuple("ObjectInfo", "key size mtime_ns version block_size")
ObjectInfo.__doc__ = "What the store says about one object (Client.stat)."
Entry = namedtuple("Entry", "key size mtime_ns version is_prefix")
Entry.__doc__ = "One listing entry (Client.list); a prefix ends with '/' and has is_prefix."


def _key(key):
    if isinstance(key, bytes):
        return key
    if not isinstance(key, str):
        raise TypeError("a key is a str, not %s" % type(key).__name__)
    return key.encode("utf-8", "surrogateescape")


def _str(b):
    return b.decode("utf-8", "surrogateescape")


def _setting(value):
    if isinstance(value, bool):
        return b"1" if value else b"0"
    if isinstance(value, (int, float)):
        return str(value).encode()
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if isinstance(value, str):
        return value.encode("utf-8", "surrogateescape")
    if isinstance(value, bytes):
        return value
    raise TypeError("a setting is a str, number or bool, not %s" % type(value).__name__)


def library_version():
    """The version of the libshoal in use."""
    return lib.shoal_version().decode()


def counter(name):
    """This process's value of the counter NAME (e.g. "object_get_requests",
    "remotecache_get_requests"); in a forked child it includes the parent's counts."""
    v = ctypes.c_uint64()
    rc = lib.shoal_counter(name.encode(), ctypes.byref(v))
    if rc:
        raise _lib.error(rc)
    return v.value


def _writable_view(buffer):
    """(address, length, keepalive) of a writable, C-contiguous BUFFER, without copying."""
    mv = memoryview(buffer)
    if mv.readonly:
        raise TypeError("readinto needs a writable buffer (bytearray, memoryview, numpy array)")
    if not mv.c_contiguous:
        raise ValueError("readinto needs a contiguous buffer")
    n = mv.nbytes
    if n == 0:
        return 0, 0, mv
    if mv.format != "B" or mv.ndim != 1:
        mv = mv.cast("B")
    arr = (ctypes.c_char * n).from_buffer(mv)
    return ctypes.addressof(arr), n, (mv, arr)


try:
    _new_bytes = ctypes.pythonapi.PyBytes_FromStringAndSize
    _new_bytes.restype = ctypes.py_object
    _new_bytes.argtypes = (ctypes.c_void_p, ctypes.c_ssize_t)
except AttributeError:  # not CPython
    _new_bytes = None

# A large bytes object to read into is fresh memory from malloc: its pages are faulted in one by
# one by the copy into it, which on a 1 MiB object costs more CPU than the copy itself (the
# profile in docs/benchmarks.md, issue 28). MADV_POPULATE_WRITE (Linux 5.14) faults them in with
# one call; the contents are left as they are. Off once the kernel says EINVAL (before 5.14).
_MADV_POPULATE_WRITE = 23
_POPULATE_MIN = 256 << 10
_PAGE = os.sysconf("SC_PAGE_SIZE")
try:
    _madvise = ctypes.CDLL(None, use_errno=True).madvise
    _madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    _madvise.restype = ctypes.c_int
except (AttributeError, OSError):
    _madvise = None


def _populate(addr, n):
    """Faults in the whole pages of [ADDR, ADDR+N) for writing, if the kernel can."""
    global _madvise
    start = (addr + _PAGE - 1) & ~(_PAGE - 1)
    end = (addr + n) & ~(_PAGE - 1)
    if _madvise is not None and end > start and \
            _madvise(start, end - start, _MADV_POPULATE_WRITE) and \
            ctypes.get_errno() == _errno.EINVAL:
        _madvise = None


class Client:
    """A shoal client in this process: the object store STORAGE (file:///dir, s3://bucket),
    read through the cache group named by meta= and cache_group= when given.

    Settings are the command line's flags as keywords, with '_' for '-': meta, cache_group,
    cache_dir, cache_size, block_size, endpoint, use_iorpc, rdma_network, buffer_size,
    max_downloads, prefetch, group_secret_file, metrics, log_level, log_file...; secret= takes
    the group secret as bytes. A bad setting raises ValueError with the library's message.

    Thread-safe. Safe across os.fork(): a child (a DataLoader worker) starts its own
    connections on first use."""

    def __init__(self, storage, secret=None, **settings):
        self._c = None
        # Kept to open an equal client in another process (pickling, for the "spawn" and
        # "forkserver" start methods); a forked child needs nothing, the library carries on.
        self._args = (storage, secret, dict(settings))
        opts = lib.shoal_options_new()
        if not opts:
            raise MemoryError("shoal_options_new")
        try:
            for name, value in settings.items():
                if value is None:
                    continue
                rc = lib.shoal_options_set(opts, name.replace("_", "-").encode(),
                                           _setting(value))
                if rc:
                    raise _lib.error(rc, "settings")
            if secret is not None:
                if isinstance(secret, str):
                    secret = secret.encode()
                rc = lib.shoal_options_set_secret(opts, secret, len(secret))
                if rc:
                    raise _lib.error(rc, "settings")
            c = lib.shoal_client_open(_setting(storage), opts)
            if not c:
                raise _lib.null_error("settings")
            self._c = c
        finally:
            lib.shoal_options_free(opts)
        self.storage = storage

    def _handle(self):
        if not self._c:
            raise ValueError("I/O operation on a closed shoal.Client")
        return self._c

    def close(self):
        """Leaves the group and frees the client. Files from open() must be closed first."""
        if self._c:
            rc = lib.shoal_client_close(self._c)
            if rc:
                raise _lib.error(rc)
            self._c = None

    @property
    def closed(self):
        return not self._c

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self):
        return "shoal.Client(%r%s)" % (self.storage, "" if self._c else ", closed")

    def __reduce__(self):
        storage, secret, settings = self._args
        return (_reopen, (storage, secret, settings))

    # ---- metadata

    def stat(self, key):
        """ObjectInfo of KEY; FileNotFoundError when there is no such object."""
        st = _lib._Stat()
        rc = lib.shoal_stat(self._handle(), _key(key), ctypes.byref(st))
        if rc:
            raise _lib.error(rc)
        return ObjectInfo(key if isinstance(key, str) else _str(key), st.size, st.mtime_ns,
                          _str(st.version), st.block_size)

    def list(self, prefix="", recursive=False):
        """Entries under PREFIX in key order. Without recursive, keys below the next '/' are
        folded into prefix entries (list "dir/" to see a folder)."""
        h = lib.shoal_list_open(self._handle(), _key(prefix),
                                _lib.LIST_RECURSIVE if recursive else 0)
        if not h:
            raise _lib.null_error()
        out = []
        try:
            while True:
                p = lib.shoal_list_next(h)
                if not p:
                    break
                e = p.contents
                out.append(Entry(_str(e.key), e.size, e.mtime_ns, _str(e.version or b""),
                                 bool(e.flags & _lib.ENTRY_PREFIX)))
        finally:
            lib.shoal_list_close(h)
        return out

    # ---- data

    def open(self, key, mode="rb", buffering=-1, advice=None, overwrite=False):
        """KEY as a binary file.

        mode "rb": a seekable io.BufferedReader over a RawFile (buffering=0: the RawFile
        itself). The version seen at open is read until close; if the object changes, reads
        fail (OSError ESTALE) rather than mix versions. advice: "sequential", "random" or
        "normal" (readahead once reads look sequential, the default).

        mode "wb" (or "xb"): a new object written from start to end (docs/writes.md): a
        BufferedWriteFile over a WriteFile. Nothing appears under KEY until close() returned,
        and then the store has the whole object (close raises OSError, EIO, if the store did
        not take it; no object is written then). An existing KEY raises FileExistsError unless
        overwrite=True. Leaving a `with` block by an exception drops the upload instead of
        committing a partial object. In a cache group the blocks are put into their owners'
        caches before close returns."""
        if mode in ("wb", "xb"):
            raw = WriteFile(self, key, overwrite=overwrite and mode == "wb")
            if buffering == 0:
                return raw
            size = buffering if buffering > 1 else 4 << 20
            return BufferedWriteFile(raw, buffer_size=size)
        if mode != "rb":
            raise ValueError("shoal objects open for reading ('rb') or writing ('wb', 'xb')")
        raw = RawFile(self, key)
        if advice:
            raw.advise(advice)
        if buffering == 0:
            return raw
        size = buffering if buffering > 1 else max(io.DEFAULT_BUFFER_SIZE, 1 << 20)
        return io.BufferedReader(raw, buffer_size=size)

    def readinto(self, key, offset, buffer):
        """Reads KEY from OFFSET into BUFFER (any writable contiguous buffer: bytearray,
        memoryview, numpy array, mmap) without an extra copy. Returns the bytes read: fewer
        than the buffer only at the end of the object."""
        addr, n, keep = _writable_view(buffer)
        f = _open(self, key)
        try:
            return _pread(f, addr, n, offset)
        finally:
            lib.shoal_close(f)
            del keep

    def read(self, key, offset=0, length=None):
        """LENGTH bytes of KEY from OFFSET (to the end when LENGTH is None) as bytes."""
        f = _open(self, key)
        try:
            st = _lib._Stat()
            lib.shoal_fstat(f, ctypes.byref(st))
            if offset < 0:
                raise ValueError("negative offset")
            avail = max(0, st.size - offset)
            n = avail if length is None else max(0, min(length, avail))
            if n == 0:
                return b""
            return _read_bytes(f, n, offset)
        finally:
            lib.shoal_close(f)

    # ---- deleting and copying

    def delete(self, key):
        """Deletes object KEY from the store. FileNotFoundError where the store can tell it was
        not there (file://; S3 answers the same for a missing key as for a deleted one). Blocks
        the group cached of it are never served for a later object under KEY (a new object has
        a new version)."""
        rc = lib.shoal_delete(self._handle(), _key(key))
        if rc:
            raise _lib.error(rc)

    def copy(self, src, dst, overwrite=False):
        """Makes DST a copy of object SRC: inside the store where it can (S3 CopyObject up to
        5 GiB, UploadPartCopy in parts above), else read through the client and written as by
        open(dst, "wb"). DST appears whole or not at all. An existing DST raises FileExistsError
        unless overwrite=True."""
        rc = lib.shoal_copy(self._handle(), _key(src), _key(dst),
                            _lib.WRITE_OVERWRITE if overwrite else 0)
        if rc:
            if -rc == _errno.EEXIST:
                raise FileExistsError(_errno.EEXIST, "%s exists (overwrite=True replaces it)"
                                      % (dst if isinstance(dst, str) else _str(dst)), dst)
            raise _lib.error(rc)


    def plan(self, items, window=None, inflight=None):
        """An access plan (shoal.Plan): ITEMS, an iterable (a generator is fine) of keys or
        (key, offset, length) in the order the job will read them. While the job reads through
        the plan's read()/readinto(), the library fetches ahead in that order within WINDOW
        bytes of the read buffers (default half of buffer_size), INFLIGHT fetches at once
        (default 8). See docs/python.md, "Access plans"."""
        from .plan import Plan
        return Plan(self, items, window=window, inflight=inflight)


def _reopen(storage, secret, settings):
    return Client(storage, secret=secret, **settings)


def _open(client, key):
    f = lib.shoal_open(client._handle(), _key(key), _lib.RDONLY)
    if not f:
        raise _lib.null_error()
    return f


def _pread(f, addr, n, offset):
    if offset < 0:
        raise ValueError("negative offset")
    got = lib.shoal_pread(f, addr, n, offset)
    if got < 0:
        raise _lib.error(got)
    return got


def _read_bytes(f, n, offset):
    """N bytes (fewer at the end) of open file F at OFFSET as a new bytes object."""
    if n <= 0:
        return b""
    if _new_bytes is not None:
        # The bytes object is filled in place before anyone else sees it: one copy (from the
        # read buffers) instead of two.
        out = _new_bytes(None, n)
        addr = ctypes.cast(ctypes.c_char_p(out), ctypes.c_void_p).value
        if n >= _POPULATE_MIN:
            _populate(addr, n)
        got = _pread(f, addr, n, offset)
        return out if got == n else out[:got]
    buf = bytearray(n)
    got = _pread(f, _writable_view(buf)[0], n, offset)
    return bytes(buf[:got])


class RawFile(io.RawIOBase):
    """One object opened for reading through a Client: seekable, readinto without an extra
    copy. Usually wrapped in io.BufferedReader by Client.open()."""

    def __init__(self, client, key):
        super().__init__()
        self._client = client  # keeps the client alive while the file is open
        self._f = _open(client, key)
        st = _lib._Stat()
        lib.shoal_fstat(self._f, ctypes.byref(st))
        self.name = key if isinstance(key, str) else _str(key)
        self.size = st.size
        self.version = _str(st.version)
        self.mtime_ns = st.mtime_ns
        self.block_size = st.block_size
        self._pos = 0

    def __reduce__(self):
        raise TypeError("a shoal.RawFile cannot be pickled: pickle the Client and open again")

    def readable(self):
        return True

    def seekable(self):
        return True

    def tell(self):
        self._check()
        return self._pos

    def seek(self, offset, whence=io.SEEK_SET):
        self._check()
        if not isinstance(offset, numbers.Integral):
            raise TypeError("an integer is required (got type %s)" % type(offset).__name__)
        offset = int(offset)
        if whence == io.SEEK_SET:
            pos = offset
        elif whence == io.SEEK_CUR:
            pos = self._pos + offset
        elif whence == io.SEEK_END:
            pos = self.size + offset
        else:
            raise ValueError("invalid whence %r" % (whence,))
        if pos < 0:
            raise OSError(22, "negative seek position %d" % pos)
        self._pos = pos
        return pos

    def readinto(self, b):
        self._check()
        addr, n, keep = _writable_view(b)
        if n == 0:
            return 0
        got = _pread(self._f, addr, n, self._pos)
        del keep
        self._pos += got
        return got

    def readall(self):
        self._check()
        out = _read_bytes(self._f, self.size - self._pos, self._pos)
        self._pos += len(out)
        return out

    def pread(self, length, offset):
        """LENGTH bytes at OFFSET (without moving the position), as bytes."""
        self._check()
        return _read_bytes(self._f, min(length, self.size - offset), offset)

    def advise(self, advice, offset=0, length=0):
        """Readahead hint: "normal", "sequential", "random", or "willneed" (fetch the blocks of
        [offset, offset+length) in the background; length 0: to the end)."""
        self._check()
        try:
            a = _lib.ADVICE[advice]
        except KeyError:
            raise ValueError("advice is one of %s" % ", ".join(_lib.ADVICE)) from None
        rc = lib.shoal_advise(self._f, offset, length, a)
        if rc:
            raise _lib.error(rc)

    def _check(self):
        if self.closed:
            raise ValueError("I/O operation on closed file")

    def close(self):
        if not self.closed and self._f:
            lib.shoal_close(self._f)
            self._f = None
        super().close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class WriteFile(io.RawIOBase):
    """One new object being written through a Client (shoal_write_open): sequential, committed
    by close(). Usually wrapped in a buffered writer by Client.open(key, "wb")."""

    def __init__(self, client, key, overwrite=False, exists_hint=None):
        super().__init__()
        self._client = client  # keeps the client alive while the file is open
        self._w = lib.shoal_write_open(client._handle(), _key(key),
                                       _lib.WRITE_OVERWRITE if overwrite else 0)
        if not self._w:
            e = _lib.null_error()
            if e.errno == _errno.EEXIST:
                raise FileExistsError(_errno.EEXIST, "%s exists (%s)" % (
                    key if isinstance(key, str) else _str(key),
                    exists_hint or "overwrite=True replaces it"), key)
            raise e
        self.name = key if isinstance(key, str) else _str(key)
        self._pos = 0
        self._aborted = False

    def __reduce__(self):
        raise TypeError("a shoal.WriteFile cannot be pickled")

    def writable(self):
        return True

    def tell(self):
        return self._pos

    def write(self, b):
        if self._w is None:
            raise ValueError("I/O operation on closed file")
        if self._aborted:
            return len(memoryview(b))  # dropped: the object will not be written
        mv = memoryview(b).cast("B")
        n = len(mv)
        if n == 0:
            return 0
        try:
            arr = (ctypes.c_char * n).from_buffer(mv)  # no copy for writable buffers
            keep = arr
            addr = ctypes.addressof(arr)
        except TypeError:
            keep = bytes(mv)
            addr = ctypes.cast(ctypes.c_char_p(keep), ctypes.c_void_p).value
        got = lib.shoal_write(self._w, addr, n)
        del keep
        if got < 0:
            raise _lib.error(got)
        self._pos += got
        return got

    def abort(self):
        """Drops the upload: nothing is written under the key; close() then only frees."""
        if self._w is not None and not self._aborted:
            self._aborted = True

    def close(self):
        if self._w is None:
            return
        w, self._w = self._w, None
        try:
            if self._aborted:
                lib.shoal_write_abort(w)
                return
            rc = lib.shoal_write_close(w)
            if rc:
                raise _lib.error(rc)
        finally:
            super().close()

    def __del__(self):
        # Like a file the program forgot to close, a writer dropped without close() commits.
        try:
            self.close()
        except Exception:  # noqa: BLE001 — nothing can be raised from a finaliser
            pass


class BufferedWriteFile(io.BufferedIOBase):
    """A WriteFile behind a write buffer (Client.open(key, "wb")). Not an io.BufferedWriter on
    purpose: libraries that see one (numpy's save, for instance) take it for an OS file and ask
    for its descriptor, which an object being uploaded does not have. A `with` block left by an
    exception drops the upload instead of committing part of the object."""

    def __init__(self, raw, buffer_size=4 << 20):
        super().__init__()
        self.raw = raw
        self.name = raw.name
        self._size = buffer_size
        self._buf = bytearray()

    def writable(self):
        return True

    def tell(self):
        return self.raw.tell() + len(self._buf)

    def _push(self, mv):
        while len(mv):
            n = self.raw.write(mv)
            mv = mv[n:]

    def write(self, b):
        if self.closed:
            raise ValueError("I/O operation on closed file")
        mv = memoryview(b).cast("B")
        n = len(mv)
        if len(self._buf) + n < self._size:
            self._buf += mv
            return n
        self.flush()
        if n >= self._size:
            self._push(mv)  # large writes go through unbuffered, without a copy
        else:
            self._buf += mv
        return n

    def flush(self):
        if self.closed:
            return
        if self._buf:
            buf, self._buf = self._buf, bytearray()
            self._push(memoryview(buf))

    def abort(self):
        """Drops the upload: nothing is written under the key."""
        self._buf = bytearray()
        self.raw.abort()

    def close(self):
        if self.closed:
            return
        try:
            if not self.raw._aborted:
                self.flush()
        except BaseException:
            self.raw.abort()
            raise
        finally:
            try:
                self.raw.close()
            finally:
                super().close()

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            self.abort()
        self.close()
        return False


def _register_fsspec():
    try:
        import fsspec
    except ImportError:
        return
    from .filesystem import ShoalFileSystem
    fsspec.register_implementation("shoal", ShoalFileSystem, clobber=True)


def __getattr__(name):
    if name == "ShoalFileSystem":
        from .filesystem import ShoalFileSystem
        return ShoalFileSystem
    raise AttributeError("module 'shoal' has no attribute %r" % name)


from .plan import Plan  # noqa: E402 — after the names plan.py takes from here

__all__.append("Plan")

_register_fsspec()
