"""The CPU kernels' library is loaded only when this user built it: planted libraries in directories others own or
can write are never loaded (a planted library's constructor would leave a marker file), a tampered library is
rebuilt, processes building at once produce one library, and a missing or failing compiler leaves the XLA path in
use with the reason in ``gradax.fused.kernel_status()``.

Builds here use a stand-in compiler that copies the library this process already built (no second compile)."""

import ctypes
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradax
from gradax import _kernels

NOBODY = 65534


@pytest.fixture(scope="module")
def built() -> Path:
    """A copy of the real library (built once per machine in the user's cache)."""
    status = _kernels.load()
    if not status.available:
        pytest.skip(f"no kernels on this machine: {status.reason}")
    return Path(status.path)


def _fake_cc(tmp_path: Path, built: Path, delay: float = 0.0, fail: bool = False) -> tuple[Path, Path]:
    """A compiler that logs each build to ``builds.log`` and copies ``built`` to its ``-o`` (or fails)."""
    log = tmp_path / "builds.log"
    action = 'echo "boom: simulated compiler error" >&2; exit 1' if fail else f'cp "{built}" "$out"'
    script = tmp_path / "fakecc"
    script.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = "--version" ]; then echo "fakecc 1.0"; exit 0; fi\n'
        f'echo build >> "{log}"\n'
        f"sleep {delay}\n"
        'while [ $# -gt 0 ]; do if [ "$1" = "-o" ]; then out="$2"; fi; shift; done\n'
        f"{action}\n"
    )
    script.chmod(0o755)
    return script, log


def _builds(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


@pytest.fixture
def planted(tmp_path) -> tuple[Path, Path]:
    """A library whose loading writes a marker file (a constructor), and that marker's path."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    marker = tmp_path / "planted-library-was-loaded"
    source = tmp_path / "planted.c"
    source.write_text(
        "#include <stdio.h>\n"
        "__attribute__((constructor)) static void planted(void) {\n"
        f'  FILE *f = fopen("{marker}", "w"); if (f) {{ fputs("loaded", f); fclose(f); }}\n'
        "}\n"
    )
    library = tmp_path / "planted.so"
    subprocess.run([cc, "-shared", "-fPIC", str(source), "-o", str(library)], check=True, capture_output=True)
    return library, marker


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """A process with no kernels loaded yet, whose temporary directories are made under ``tmp_path/tmp``. Loading
    runs the library's constructors (``dlopen``) but registers nothing with XLA: it holds this process's real
    library already, and refuses a second one under the same names."""
    monkeypatch.setattr(_kernels, "_status", None)
    monkeypatch.setattr(_kernels, "_register", lambda path: ctypes.CDLL(str(path)))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    monkeypatch.delenv("GRADAX_DISABLE_KERNELS", raising=False)


def _plant(directory: Path, cc: Path, planted: Path) -> Path:
    """``planted`` copied where gradax would look for its library, with a matching SHA-256 record beside it."""
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / f"{_kernels.LIBRARY_STEM}-{_kernels._key(str(cc))}.so"
    shutil.copy(planted, target)
    _kernels._digest_path(target).write_text(_kernels._sha256(target))
    return target


def _give_away(monkeypatch, *paths: Path) -> None:
    """Makes ``paths`` belong to another user: ``chown`` to nobody when running as root, else gradax is told it runs
    as a user who owns nothing."""
    if os.geteuid() == 0:
        for path in paths:
            os.chown(path, NOBODY, NOBODY)
    else:
        monkeypatch.setattr(_kernels, "_user", lambda: os.geteuid() + 1)


def test_planted_library_can_run_code(planted):
    """The proof below is meaningful: loading the planted library does leave its marker."""
    library, marker = planted
    subprocess.run([sys.executable, "-c", f"import ctypes; ctypes.CDLL({str(library)!r})"], check=True)
    assert marker.read_text() == "loaded"


def test_planted_library_in_foreign_directory_is_never_loaded(monkeypatch, tmp_path, built, planted, fresh):
    cc, log = _fake_cc(tmp_path, built)
    monkeypatch.setenv("CC", str(cc))
    monkeypatch.setenv("GRADAX_CACHE_DIR", str(tmp_path / "cache"))
    target = _plant(tmp_path / "cache" / "kernels", cc, planted[0])
    _give_away(monkeypatch, tmp_path / "cache", tmp_path / "cache" / "kernels", target, _kernels._digest_path(target))
    status = _kernels.load()
    assert not planted[1].exists()
    assert status.path != str(target)
    if os.geteuid() == 0:  # gradax built its own library in a fresh private directory
        assert status.available and "belongs to user id 65534" in status.note
        assert Path(status.path).parent.parent == tmp_path / "tmp" and _builds(log) == 1
    else:
        assert not status.available and "belongs to user id" in status.reason


def test_planted_library_in_world_writable_directory_is_never_loaded(monkeypatch, tmp_path, built, planted, fresh):
    cc, _ = _fake_cc(tmp_path, built)
    monkeypatch.setenv("CC", str(cc))
    monkeypatch.setenv("GRADAX_CACHE_DIR", str(tmp_path / "cache"))
    target = _plant(tmp_path / "cache" / "kernels", cc, planted[0])
    (tmp_path / "cache" / "kernels").chmod(0o777)
    status = _kernels.load()
    assert not planted[1].exists()
    assert status.available and status.path != str(target)
    assert "can be written by its group or by others (mode drwxrwxrwx)" in status.note


def test_shared_temporary_fallback_planted_by_another_user(monkeypatch, tmp_path, built, planted, fresh):
    """The attack of issue 23: the home cache cannot be created, so the cache is ``gradax-<uid>`` in the shared
    temporary directory, which another user created first with a library in it."""
    cc, _ = _fake_cc(tmp_path, built)
    monkeypatch.setenv("CC", str(cc))
    monkeypatch.delenv("GRADAX_CACHE_DIR", raising=False)
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    (tmp_path / "tmp").chmod(0o1777)
    shared = _kernels._cache_dir()
    assert shared == tmp_path / "tmp" / f"gradax-{os.geteuid()}"
    target = _plant(shared / "kernels", cc, planted[0])
    _give_away(monkeypatch, shared, shared / "kernels", target, _kernels._digest_path(target))
    status = _kernels.load()
    assert not planted[1].exists()
    assert status.path != str(target)


def test_built_library_is_private_and_recorded(monkeypatch, tmp_path, built, fresh):
    cc, log = _fake_cc(tmp_path, built)
    monkeypatch.setenv("CC", str(cc))
    monkeypatch.setenv("GRADAX_CACHE_DIR", str(tmp_path / "cache"))
    status = _kernels.load()
    assert status.available and status.note == "" and _builds(log) == 1
    library = Path(status.path)
    mode = lambda p: stat.S_IMODE(os.stat(p).st_mode)
    assert mode(tmp_path / "cache") == mode(library.parent) == mode(library) == 0o700
    assert mode(_kernels._digest_path(library)) == 0o600
    assert _kernels._digest_path(library).read_text() == _kernels._sha256(built)
    assert sorted(p.name for p in library.parent.iterdir()) == [".lock", library.name, library.name + ".sha256"]
    monkeypatch.setattr(_kernels, "_status", None)  # a second process: loads the library, no build
    assert _kernels.load().path == status.path and _builds(log) == 1


@pytest.mark.parametrize("tamper", ["planted", "no_record", "link", "group_writable"])
def test_tampered_library_is_rebuilt(monkeypatch, tmp_path, built, planted, fresh, tamper):
    cc, log = _fake_cc(tmp_path, built)
    monkeypatch.setenv("CC", str(cc))
    monkeypatch.setenv("GRADAX_CACHE_DIR", str(tmp_path / "cache"))
    library = Path(_kernels.load().path)  # loaded in this process: replaced below, never written in place
    swap = lambda: os.replace(shutil.copy(planted[0], tmp_path / "swap.so"), library)
    if tamper == "planted":  # new bytes, the old record
        swap()
        want = "does not have the SHA-256 recorded when it was built"
    elif tamper == "no_record":
        _kernels._digest_path(library).unlink()
        swap()
        want = ".sha256 cannot be inspected"
    elif tamper == "link":
        library.unlink()
        library.symlink_to(planted[0])
        want = "is not a regular file"
    else:
        library.chmod(0o777)
        want = "can be written by its group or by others"
    monkeypatch.setattr(_kernels, "_status", None)
    status = _kernels.load()
    assert not planted[1].exists()
    assert status.available and status.path == str(library) and want in status.note
    assert _builds(log) == 2 and _kernels._verify(library) == ""
    assert _kernels._sha256(library) == _kernels._sha256(built)


CONCURRENT = """
import json
from gradax import _kernels
status = _kernels.load()
print(json.dumps({"available": status.available, "path": status.path, "reason": status.reason}))
"""


def test_concurrent_builds_make_one_library(tmp_path, built):
    """Three processes start at once on an empty cache with a slow compiler: one builds, the others wait and load."""
    cc, log = _fake_cc(tmp_path, built, delay=0.5)
    env = {**os.environ, "CC": str(cc), "GRADAX_CACHE_DIR": str(tmp_path / "cache"), "JAX_PLATFORMS": "cpu"}
    env.pop("GRADAX_DISABLE_KERNELS", None)
    procs = [
        subprocess.Popen([sys.executable, "-c", CONCURRENT], env=env, stdout=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    results = [json.loads(p.communicate(timeout=120)[0]) for p in procs]
    assert all(r["available"] for r in results), results
    assert len({r["path"] for r in results}) == 1 and _builds(log) == 1
    library = Path(results[0]["path"])
    assert sorted(p.name for p in library.parent.iterdir()) == [".lock", library.name, library.name + ".sha256"]


def _xla_path_works():
    """With the kernels unavailable, a fused AdamW step is exactly update + apply_updates, with no kernel call."""
    assert not gradax.fused.kernel_status().available
    opt = gradax.fused.adamw(1e-2, weight_decay=0.1)
    params = {"w": jnp.arange(6.0).reshape(2, 3), "b": jnp.ones(3)}
    grads = jax.tree.map(lambda x: 0.1 * x + 0.5, params)
    state = opt.init(params)
    step = jax.jit(opt.step)
    assert "gradax_" not in step.lower(params, state, grads).as_text()
    got = step(params, state, grads)
    updates, want_state = opt.update(grads, state, params)
    want = (gradax.apply_updates(params, updates), want_state)
    jax.tree.map(np.testing.assert_array_equal, got, want)


@pytest.mark.parametrize("how", ["CC", "PATH"])
def test_missing_compiler_leaves_xla_path(monkeypatch, tmp_path, fresh, how):
    if how == "CC":
        monkeypatch.setenv("CC", "/nonexistent")
        want = "no C compiler found (CC='/nonexistent' is not an executable)"
    else:
        monkeypatch.delenv("CC", raising=False)
        monkeypatch.setenv("PATH", str(tmp_path / "empty"))
        want = "no C compiler found (set CC, or install gcc or clang)"
    monkeypatch.setenv("GRADAX_CACHE_DIR", str(tmp_path / "cache"))
    assert gradax.fused.kernel_status().reason == want
    _xla_path_works()


def test_failing_build_leaves_xla_path(monkeypatch, tmp_path, built, fresh):
    cc, log = _fake_cc(tmp_path, built, fail=True)
    monkeypatch.setenv("CC", str(cc))
    monkeypatch.setenv("GRADAX_CACHE_DIR", str(tmp_path / "cache"))
    status = gradax.fused.kernel_status()
    assert status.reason.startswith("RuntimeError: `") and "boom: simulated compiler error" in status.reason
    assert _builds(log) == 1 and [p.name for p in (tmp_path / "cache" / "kernels").iterdir()] == [".lock"]
    _xla_path_works()
