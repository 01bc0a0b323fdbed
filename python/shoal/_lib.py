"""ctypes bindings of libshoal (include/shoal/shoal.h) and where the library is found."""

import ctypes
import ctypes.util
import errno as _errno
import os
import subprocess

ABI_VERSION = 1
SONAME = "libshoal.so.%d" % ABI_VERSION


class _Stat(ctypes.Structure):
    _fields_ = [
        ("size", ctypes.c_uint64),
        ("mtime_ns", ctypes.c_int64),
        ("block_size", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
        ("version", ctypes.c_char * 132),
        ("reserved", ctypes.c_uint64 * 8),
    ]


class _Entry(ctypes.Structure):
    _fields_ = [
        ("key", ctypes.c_char_p),
        ("flags", ctypes.c_uint32),
        ("size", ctypes.c_uint64),
        ("mtime_ns", ctypes.c_int64),
        ("version", ctypes.c_char_p),
    ]


ENTRY_PREFIX = 1
LIST_RECURSIVE = 1
RDONLY = 0
WRITE_OVERWRITE = 1
ADVICE = {"normal": 0, "sequential": 1, "random": 2, "willneed": 3}


def _candidates():
    """Where to look for libshoal, in order (see docs/python.md)."""
    env = os.environ.get("SHOAL_LIBRARY")
    if env:
        yield env, "SHOAL_LIBRARY"
        return
    # A checkout: python/shoal/_lib.py -> the repository's build/ folder.
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    yield os.path.join(root, "build", "libshoal.so"), "the build tree"
    # Installed: the dynamic loader's path (LD_LIBRARY_PATH, ld.so.cache, /usr/local/lib ...).
    yield SONAME, "the loader's search path"
    found = ctypes.util.find_library("shoal")
    if found:
        yield found, "ldconfig"
    for d in ("/usr/local/lib", "/usr/local/lib64", "/usr/lib"):
        yield os.path.join(d, SONAME), d
    try:
        out = subprocess.run(["pkg-config", "--variable=libdir", "shoal"], capture_output=True,
                             text=True, timeout=10)
        if out.returncode == 0 and out.stdout.strip():
            yield os.path.join(out.stdout.strip(), SONAME), "pkg-config"
    except (OSError, subprocess.SubprocessError):
        pass


def _load():
    tried = []
    for path, where in _candidates():
        if os.sep in path and not os.path.exists(path):
            tried.append("%s (%s): not there" % (path, where))
            continue
        try:
            return ctypes.CDLL(path, use_errno=True)
        except OSError as e:
            tried.append("%s (%s): %s" % (path, where, e))
    raise ImportError("libshoal not found; build it (cmake --build build) or install it "
                      "(cmake --install build), or set SHOAL_LIBRARY to libshoal.so. Tried:\n  " +
                      "\n  ".join(tried))


lib = _load()

_c = ctypes
_proto = {
    "shoal_version": (_c.c_char_p, []),
    "shoal_errmsg": (_c.c_char_p, []),
    "shoal_options_new": (_c.c_void_p, []),
    "shoal_options_free": (None, [_c.c_void_p]),
    "shoal_options_set": (_c.c_int, [_c.c_void_p, _c.c_char_p, _c.c_char_p]),
    "shoal_options_set_secret": (_c.c_int, [_c.c_void_p, _c.c_char_p, _c.c_size_t]),
    "shoal_client_open": (_c.c_void_p, [_c.c_char_p, _c.c_void_p]),
    "shoal_client_close": (_c.c_int, [_c.c_void_p]),
    "shoal_stat": (_c.c_int, [_c.c_void_p, _c.c_char_p, _c.POINTER(_Stat)]),
    "shoal_list_open": (_c.c_void_p, [_c.c_void_p, _c.c_char_p, _c.c_int]),
    "shoal_list_next": (_c.POINTER(_Entry), [_c.c_void_p]),
    "shoal_list_close": (None, [_c.c_void_p]),
    "shoal_open": (_c.c_void_p, [_c.c_void_p, _c.c_char_p, _c.c_int]),
    "shoal_fstat": (_c.c_int, [_c.c_void_p, _c.POINTER(_Stat)]),
    "shoal_pread": (_c.c_ssize_t, [_c.c_void_p, _c.c_void_p, _c.c_size_t, _c.c_uint64]),
    "shoal_advise": (_c.c_int, [_c.c_void_p, _c.c_uint64, _c.c_uint64, _c.c_int]),
    "shoal_close": (_c.c_int, [_c.c_void_p]),
    "shoal_counter": (_c.c_int, [_c.c_char_p, _c.POINTER(_c.c_uint64)]),
    "shoal_write_open": (_c.c_void_p, [_c.c_void_p, _c.c_char_p, _c.c_int]),
    "shoal_write": (_c.c_ssize_t, [_c.c_void_p, _c.c_void_p, _c.c_size_t]),
    "shoal_write_close": (_c.c_int, [_c.c_void_p]),
    "shoal_write_abort": (None, [_c.c_void_p]),
    "shoal_delete": (_c.c_int, [_c.c_void_p, _c.c_char_p]),
    "shoal_copy": (_c.c_int, [_c.c_void_p, _c.c_char_p, _c.c_char_p, _c.c_int]),
}
for _name, (_res, _args) in _proto.items():
    _fn = getattr(lib, _name)
    _fn.restype = _res
    _fn.argtypes = _args


def errmsg():
    m = lib.shoal_errmsg()
    return m.decode("utf-8", "replace") if m else ""


def error(rc, what=None):
    """The Python exception for a negative errno RC from the library, with its message.
    OSError picks the subclass: ENOENT -> FileNotFoundError, EACCES -> PermissionError..."""
    code = -rc if rc < 0 else rc
    msg = errmsg() or os.strerror(code)
    if code == _errno.EINVAL and what == "settings":
        return ValueError(msg)
    return OSError(code, msg)


def null_error(what=None):
    """The exception for a NULL return (errno was set by the library)."""
    return error(ctypes.get_errno() or _errno.EIO, what)
