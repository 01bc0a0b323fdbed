"""Installation [P2]: `pip install ./python --no-build-isolation`, offline, into a venv that sees
the system's site packages (Debian's setuptools, fsspec); the installed package finds libshoal
(SHOAL_LIBRARY here, as the build tree is not next to it) and fsspec finds the "shoal" protocol
through the package's entry point, without `import shoal` first."""
import os
import shutil
import subprocess
import sys

from conftest import SRC, python_env


def test_pip_install_offline_into_a_venv(tmp_path):
    # A copy, so that setuptools' build/ and egg-info do not land in the source tree.
    src = tmp_path / "src"
    shutil.copytree(os.path.join(SRC, "python"), src,
                    ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)],
                   check=True)
    py = str(venv / "bin" / "python")
    env = dict(os.environ, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    env.pop("PYTHONPATH", None)
    r = subprocess.run([py, "-m", "pip", "install", "--no-build-isolation", "--no-index",
                        str(src)], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]

    store = tmp_path / "store"
    (store / "d").mkdir(parents=True)
    (store / "d" / "k.bin").write_bytes(b"0123456789" * 1000)
    code = r"""
import sys, fsspec
assert "shoal" not in sys.modules
fs = fsspec.filesystem("shoal", storage=sys.argv[1])   # through the entry point
import shoal
assert shoal.__file__.startswith(sys.prefix), shoal.__file__
assert type(fs).__module__ == "shoal.filesystem"
assert fs.ls("d", detail=False) == ["d/k.bin"]
assert fs.cat_file("d/k.bin", 10, 20) == b"0123456789"
assert shoal.Client(sys.argv[1]).read("d/k.bin", 5, 3) == b"567"
print("ok", shoal.library_version())
"""
    penv = python_env(ASAN_OPTIONS="detect_leaks=0")
    penv.pop("PYTHONPATH", None)
    r = subprocess.run([py, "-c", code, "file://" + str(store)], capture_output=True, text=True,
                       env=penv, cwd=str(tmp_path), timeout=120)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert r.stdout.startswith("ok ")
    assert not os.path.exists(os.path.join(SRC, "python", "build"))
