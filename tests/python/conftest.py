"""Fixtures for the Python tests: real members (`shoal serve`), a real S3 server (s3rver), trees of
objects with awkward keys, and a harness that stops what it started by PID with SIGTERM and fails
the test when a process exits non-zero or logs a sanitizer report — the Python counterpart of
tests/integration/lib.sh.

Run from CTest (see CMakeLists.txt), which sets SHOAL_BIN, SHOAL_SRC, SHOAL_LIBRARY and
PYTHONPATH; in the sanitizer build it also preloads libasan into this interpreter (LD_PRELOAD), since a
Python process can only load an ASan-built libshoal with the runtime first. The preload is taken
out of the environment here so that the processes the tests start (members, node, pip) do not
inherit it; tests that start another Python with libshoal pass it on explicitly (python_env).
"""
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import pytest

SRC = os.environ.get("SHOAL_SRC") or os.path.abspath(os.path.join(os.path.dirname(__file__),
                                                                  "..", ".."))
SHOAL = os.environ.get("SHOAL_BIN") or os.path.join(SRC, "build", "shoal")
PRELOAD = os.environ.pop("LD_PRELOAD", None)
# Members keep leak checking on whatever this interpreter runs with (CPython itself is not
# leak-clean at exit, so the tests run it with detect_leaks=0).
MEMBER_ASAN = os.environ.get("SHOAL_MEMBER_ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0")
SANITIZER_RE = re.compile(rb"Sanitizer|runtime error")
DEADLINE = 30.0

sys.path.insert(0, os.path.join(SRC, "python"))


def python_env(**extra):
    """Environment for a child Python that loads libshoal (the preload, when there is one)."""
    env = dict(os.environ)
    if PRELOAD:
        env["LD_PRELOAD"] = PRELOAD
    env.update(extra)
    return env


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_until(what, fn, timeout=DEADLINE, interval=0.1):
    end = time.monotonic() + timeout
    while True:
        v = fn()
        if v:
            return v
        if time.monotonic() > end:
            raise AssertionError("timed out after %.0f s waiting for %s" % (timeout, what))
        time.sleep(interval)


class Proc:
    def __init__(self, name, popen, err_path, log_path=None):
        self.name, self.popen, self.err_path, self.log_path = name, popen, err_path, log_path

    def log_text(self):
        out = b""
        for p in (self.err_path, self.log_path):
            if p and os.path.exists(p):
                with open(p, "rb") as f:
                    out += f.read()
        return out


class Harness:
    """Processes a test starts; stop_all() is called at teardown and fails the test on a
    non-zero exit or a sanitizer report."""

    def __init__(self, tmp):
        self.tmp = tmp
        self.procs = {}

    def start(self, name, argv, env=None, log_path=None, check_exit=True):
        err_path = os.path.join(self.tmp, name + ".err")
        err = open(err_path, "wb")
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=err, env=env)
        err.close()
        proc = Proc(name, p, err_path, log_path)
        proc.check_exit = check_exit
        self.procs[name] = proc
        return proc

    def member(self, name, storage, *flags):
        """A `shoal serve` member with its own cache dir, log and metrics endpoint."""
        log = os.path.join(self.tmp, name + ".log")
        env = dict(os.environ, ASAN_OPTIONS=MEMBER_ASAN)
        argv = [SHOAL, "serve", storage, "--cache-dir", os.path.join(self.tmp, name + ".cache"),
                "--log-file", log, "--log-level", "debug", "--group-ip", "127.0.0.1", *flags]
        return self.start(name, argv, env=env, log_path=log)

    def group_alive(self, meta, group):
        r = subprocess.run([SHOAL, "group", "--meta", meta, "--cache-group", group],
                           capture_output=True, text=True,
                           env=dict(os.environ, ASAN_OPTIONS=MEMBER_ASAN))
        last = (r.stdout.strip().splitlines() or [""])[-1].split()
        return int(last[2]) if r.returncode == 0 and len(last) > 2 and last[2].isdigit() else -1

    def wait_members(self, meta, group, n):
        for p in self.procs.values():
            if p.popen.poll() is not None:
                raise AssertionError("%s exited %s: %s" % (p.name, p.popen.returncode,
                                                           p.log_text()[-800:]))
        wait_until("%d live members in %s" % (n, group),
                   lambda: self.group_alive(meta, group) == n)

    def metrics_addr(self, name):
        p = self.procs[name]

        def find():
            m = re.findall(rb"prometheus metrics listening on (\S+)", p.log_text())
            return m[-1].decode() if m else None
        return wait_until("%s's metrics address" % name, find)

    def metrics(self, name):
        """{metric name: value} of member NAME, labels dropped (summed)."""
        with urllib.request.urlopen("http://%s/metrics" % self.metrics_addr(name),
                                    timeout=10) as r:
            text = r.read().decode()
        out = {}
        for line in text.splitlines():
            if not line or line.startswith("#"):
                continue
            name_labels, value = line.rsplit(" ", 1)
            key = name_labels.split("{", 1)[0]
            out[key] = out.get(key, 0.0) + float(value)
        return out

    def stop(self, name):
        """SIGTERM, then the exit status must be 0 and the logs free of sanitizer reports."""
        p = self.procs.pop(name)
        if p.popen.poll() is None:
            p.popen.send_signal(signal.SIGTERM)
        try:
            rc = p.popen.wait(timeout=DEADLINE)
        except subprocess.TimeoutExpired:
            p.popen.kill()
            p.popen.wait()
            raise AssertionError("%s did not stop within %.0f s of SIGTERM" % (name, DEADLINE))
        text = p.log_text()
        bad = [l for l in text.splitlines() if SANITIZER_RE.search(l)]
        if bad:
            raise AssertionError("%s: %s" % (name, b"\n".join(bad[:3]).decode("replace")))
        if p.check_exit and rc != 0:
            raise AssertionError("%s exited %d: %s" % (name, rc, text[-800:].decode("replace")))

    def stop_all(self):
        errors = []
        for name in reversed(list(self.procs)):  # members before the store they read
            try:
                self.stop(name)
            except AssertionError as e:
                errors.append(str(e))
        if errors:
            raise AssertionError("; ".join(errors))


@pytest.fixture
def harness():
    tmp = tempfile.mkdtemp(prefix="shoal-py.")
    h = Harness(tmp)
    try:
        yield h
        h.stop_all()
    finally:
        for p in h.procs.values():  # only after a failure: do not leave them running
            if p.popen.poll() is None:
                p.popen.kill()
                p.popen.wait()
        shutil.rmtree(tmp, ignore_errors=True)


# ---- trees of objects -------------------------------------------------------------------------

BLOCK = 256 * 1024

AWKWARD = [
    ("space dir/file with spaces.bin", 3000),
    ("space dir/big multi block.bin", 1300000),
    ("unicode/ünïcødé-日本語-😀.bin", 5000),
    ("unicode/Ελληνικά/κλειδί.bin", 300000),
    ("plus/a+b+c.bin", 777),
    ("pct/100%.bin", 1000),
    ("pct/%41%2F%zz.bin", 600000),
    ("deep/a/b/c/d/e/f/g/h/deep.bin", 270000),
    ("sym/x=y&z;@,$!'()*.bin", 1234),
    ("sym/<tag>&amp;\"q\".bin", 4321),
    ("sym/#hash?query.bin", 555),
    ("sym/tilde~home~.bin", 66),
    ("sym/back\\slash.bin", 99),
    ("sym/ brackets [x] {y} ^|`.bin", 101),
    ("dots/a..b/..c.bin", 102),
    ("dots/.hidden", 103),
    ("empty/zero.bin", 0),
    ("exact/one-block.bin", BLOCK),
    ("exact/two-blocks.bin", 2 * BLOCK),
    ("exact/one-more.bin", BLOCK + 1),
    ("exact/one-less.bin", BLOCK - 1),
    ("mixed/UPPER lower.bin", 7000),
]


def make_tree(root, extra=()):
    """Writes the awkward objects and EXTRA (key, size) under ROOT; returns {key: bytes}."""
    rnd = random.Random(16)
    objs = {}
    for key, size in list(AWKWARD) + list(extra):
        data = rnd.randbytes(size)
        path = os.path.join(root, key)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
        objs[key] = data
    return objs


def blocks_of(objs, block=BLOCK):
    return sum((len(d) + block - 1) // block for d in objs.values())


@pytest.fixture
def tree(tmp_path):
    root = str(tmp_path / "store")
    objs = make_tree(root)
    return root, objs


# ---- s3rver -------------------------------------------------------------------------------------

def s3rver_ready(what, port, bucket):
    """Points the AWS credentials at an s3rver on PORT and waits until it lists BUCKET; returns
    its endpoint."""
    endpoint = "http://127.0.0.1:%d" % port
    os.environ.update(AWS_ACCESS_KEY_ID="S3RVER", AWS_SECRET_ACCESS_KEY="S3RVER",
                      AWS_REGION="us-east-1")

    def ready():
        try:
            with urllib.request.urlopen("%s/%s?list-type=2&max-keys=1" % (endpoint, bucket),
                                        timeout=2) as r:
                return r.status == 200
        except OSError:
            return False
    wait_until(what, ready)
    return endpoint


@pytest.fixture
def s3rver(harness):
    """A real S3 server with one bucket; yields (endpoint, bucket, put(dir))."""
    js = os.path.join(SRC, ".deps", "node_modules", "s3rver", "bin", "s3rver.js")
    if not shutil.which("node") or not os.path.exists(js):
        pytest.fail("s3rver is not installed (scripts/setup.sh installs node and s3rver)")
    bucket = "shoal-py"
    port = free_port()
    data = os.path.join(harness.tmp, "s3rver.data")
    os.makedirs(data)
    # s3rver makes its continuation tokens with DES, which OpenSSL 3 keeps in its legacy
    # provider. node is stopped by SIGTERM too, but its exit status on a signal is not 0.
    harness.start("s3rver", ["node", "--openssl-legacy-provider", js, "-d", data, "-a",
                             "127.0.0.1", "-p", str(port), "--configure-bucket", bucket,
                             "--silent"], check_exit=False)
    endpoint = s3rver_ready("s3rver", port, bucket)

    def put(directory):
        subprocess.run([sys.executable, os.path.join(SRC, "tests", "integration", "s3fault.py"),
                        "put", "--endpoint", endpoint, "--bucket", bucket, "--dir", directory,
                        "--key", "S3RVER", "--secret", "S3RVER"], check=True,
                       stdout=subprocess.DEVNULL)
    yield endpoint, bucket, put
