"""Single-pass CPU kernels (``fused_*.c``, sharing ``fused_common.h``), built with the system C compiler on first use
into one shared library and called through XLA's FFI.

The shared library is compiled once per sources, compiler, jaxlib and machine into a cache directory
(``$GRADAX_CACHE_DIR``, else ``$XDG_CACHE_HOME/gradax``, else ``~/.cache/gradax``). Without a C compiler, or with
``GRADAX_DISABLE_KERNELS=1``, :func:`load` reports why and callers use their XLA implementation instead.

Only a library this user built is loaded. The cache directories are created with mode 0700 and used only when they
belong to the user and no one else can write to them (otherwise a fresh private temporary directory is used, and
``KernelStatus.note`` says why); the library must be a regular file of the user that no one else can write, whose
SHA-256 matches the one recorded beside it when it was built (otherwise it is rebuilt). Builds are written to a
temporary file and renamed, under a file lock, so that processes building at once produce one library.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import platform
import re
import shutil
import stat
import subprocess
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import jaxlib
import numpy as np

from .._quantization import BlockQuantized
from . import _scalars

_HERE = Path(__file__).parent
SOURCES = tuple(sorted(_HERE.glob("fused_*.c")))
LIBRARY_STEM = "fused_kernels"  # the library is <stem>-<key>.so in the kernel directory
HEADERS = tuple(sorted(_HERE.glob("*.h")))
# every FFI handler the sources define (``XLA_FFI_Error* gradax_...(XLA_FFI_CallFrame* frame)``), registered by name
TARGETS = tuple(
    name
    for source in SOURCES
    for name in re.findall(r"^XLA_FFI_Error\* (gradax_\w+)\(XLA_FFI_CallFrame\*", source.read_text(), re.M)
)
# -ffp-contract=off: no fused multiply-adds, so every target clone (avx512f, avx2, baseline) rounds alike;
# -fno-trapping-math: the loops' selects (Nesterov, bfloat16 NaN, 8-bit codes) may evaluate both sides, which lets
# them vectorize; it changes no value, only which floating-point exception flags may be raised
FLAGS = (
    "-O3",
    "-std=c11",
    "-shared",
    "-fPIC",
    "-pthread",
    "-ffp-contract=off",
    "-fno-math-errno",
    "-fno-trapping-math",
)

# The scalars of each kernel's step, in the order Python stacks them and the C enums of the generated
# fused_scalars.h index them (one table: _scalars.py).
ADAMW_SCALARS = _scalars.ADAMW.names
LION_SCALARS = _scalars.LION.names
ADAFACTOR_SCALARS = _scalars.ADAFACTOR.names
MARS_SCALARS = _scalars.MARS.names
CAUTIOUS_ADAMW_SCALARS = _scalars.CAUTIOUS_ADAMW.names
CAME_SCALARS = _scalars.CAME.names
FACTORED_SCALARS = _scalars.FACTORED.names
SCALARS_HEADER = "fused_scalars.h"  # generated into the build directory by _scalars.header()


@dataclass(frozen=True)
class KernelStatus:
    """Whether the CPU kernels can be used in this process, and why not."""

    available: bool
    reason: str  # "" when available
    path: str  # the shared library, "" when not built
    note: str = ""  # what was refused on the way: a cache directory others can write, a library that was rebuilt


_lock = threading.Lock()
_status: KernelStatus | None = None


def _user() -> int | None:
    """The user whose files are trusted (the effective user id); None where the platform has no user ids."""
    return os.geteuid() if hasattr(os, "geteuid") else None


def _untrusted(path: Path, kind: str) -> str:
    """Why ``path`` must not be trusted, "" when it can: it must be a ``kind`` ("directory", or "file": a regular
    file, not a link) that belongs to this user and that neither its group nor others can write."""
    try:
        info = os.stat(path) if kind == "directory" else os.lstat(path)
    except OSError as err:
        return f"{path} cannot be inspected ({err.strerror or err})"
    if not (stat.S_ISDIR if kind == "directory" else stat.S_ISREG)(info.st_mode):
        return f"{path} is not a {'directory' if kind == 'directory' else 'regular file'}"
    user = _user()
    if user is not None and info.st_uid != user:
        return f"{path} belongs to user id {info.st_uid}, not to this user ({user})"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"{path} can be written by its group or by others (mode {stat.filemode(info.st_mode)})"
    return ""


def _private_dir(path: Path) -> str:
    """Creates ``path`` (mode 0700) when it is missing; returns why it must not hold the library, "" when it can."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as err:
        return f"{path} cannot be created ({err.strerror or err})"
    return _untrusted(path, "directory")


def _cache_dir() -> Path:
    """``$GRADAX_CACHE_DIR``, else ``$XDG_CACHE_HOME/gradax`` or ``~/.cache/gradax``; a per-user temporary directory
    when that one cannot be created (a read-only home). Whether it can be trusted is :func:`_kernel_dir`'s check."""
    if os.environ.get("GRADAX_CACHE_DIR"):
        return Path(os.environ["GRADAX_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    path = Path(base) / "gradax"
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        if os.access(path, os.W_OK):
            return path
    except OSError:
        pass
    user = _user()
    return Path(tempfile.gettempdir()) / f"gradax-{'user' if user is None else user}"


def _kernel_dir() -> tuple[Path, str]:
    """Where the library is built and loaded from, and a note when that is not the cache: the cache's ``kernels``
    directory when both are this user's alone, else a fresh private temporary directory (anyone may have created the
    cache's predictable path in a shared temporary directory, or planted a library in a directory they can write)."""
    cache = _cache_dir()
    why = _private_dir(cache) or _private_dir(cache / "kernels")
    if not why:
        return cache / "kernels", ""
    fresh = Path(tempfile.mkdtemp(prefix="gradax-kernels-"))
    if fresh_why := _untrusted(fresh, "directory"):
        raise RuntimeError(f"no private directory to build the kernels in: {why}; {fresh_why}")
    return fresh, f"did not use the cache directory: {why}; built in the private directory {fresh} instead"


def _compiler() -> str | None:
    """``$CC`` when it is set (and None when it is not an executable), else the first of cc, gcc, clang."""
    if os.environ.get("CC"):
        return shutil.which(os.environ["CC"])
    for name in ("cc", "gcc", "clang"):
        if shutil.which(name):
            return shutil.which(name)
    return None


def _key(cc: str) -> str:
    """The library's name part: a hash of the sources (the generated scalars header included), the compiler's
    version, jaxlib's version, the flags and the machine."""
    files = [(path.name, path.read_bytes()) for path in (*SOURCES, *HEADERS)]
    files.append((SCALARS_HEADER, _scalars.header().encode()))
    source = b"\0".join(name.encode() + b"\0" + text for name, text in files)
    version = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=60).stdout
    return hashlib.sha256(
        b"\0".join(
            s.encode() if isinstance(s, str) else s
            # no -march=native: the target clones pick avx512f/avx2/baseline at load time, so one build fits any
            # CPU of this architecture
            for s in (source, version, jaxlib.__version__, " ".join(FLAGS), platform.machine())
        )
    ).hexdigest()[:16]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _digest_path(library: Path) -> Path:
    """The file beside ``library`` that records its SHA-256 when it is built."""
    return library.with_name(library.name + ".sha256")


def _verify(library: Path) -> str:
    """Why ``library`` must not be loaded, "" when it can: it and its recorded SHA-256 are this user's regular files
    that no one else can write, and its bytes have that SHA-256. (Its directory is this user's alone, so nobody else
    can swap it between this check and the load.)"""
    if not os.path.lexists(library):
        return f"{library} is not built yet"
    why = _untrusted(library, "file") or _untrusted(_digest_path(library), "file")
    if why:
        return why
    if _sha256(library) != _digest_path(library).read_text().strip():
        return f"{library} does not have the SHA-256 recorded when it was built"
    return ""


@contextlib.contextmanager
def _build_lock(directory: Path):
    """Holds an exclusive lock on ``directory/.lock`` (POSIX ``flock``; where there is none, the atomic rename alone
    keeps the library whole)."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    fd = os.open(directory / ".lock", os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _write_private(path: Path, data: bytes) -> None:
    """Writes ``data`` to ``path`` at once: a temporary file of mode 0600 beside it, renamed."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _build(cc: str) -> tuple[Path, str]:
    """The verified library for ``cc``, built unless the kernel directory holds one, and a note on what was refused
    on the way. Processes that build at once wait for each other's lock: one compiles, the others load its result."""
    directory, note = _kernel_dir()
    out = directory / f"{LIBRARY_STEM}-{_key(cc)}.so"
    with _build_lock(directory):
        why = _verify(out)
        if not why:
            return out, note
        if os.path.lexists(out):
            note = "; ".join(filter(None, (note, f"rebuilt the library: {why}")))
        with tempfile.TemporaryDirectory(dir=directory) as tmp:
            tmp_out = Path(tmp) / out.name
            (Path(tmp) / SCALARS_HEADER).write_text(_scalars.header())
            cmd = [cc, *FLAGS, f"-I{tmp}", f"-I{jax.ffi.include_dir()}", *map(str, SOURCES), "-o", str(tmp_out), "-lm"]
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
            if proc.returncode != 0:
                raise RuntimeError(f"`{' '.join(cmd)}` failed:\n{proc.stderr[-2000:]}")
            os.chmod(tmp_out, 0o700)
            _write_private(_digest_path(out), _sha256(tmp_out).encode())
            os.replace(tmp_out, out)
        if why := _verify(out):
            raise RuntimeError(f"the library just built cannot be verified: {why}")
    return out, note


def _register(path: Path) -> None:
    """Loads the verified library at ``path`` and registers its handlers with XLA (once per process: XLA refuses a
    second library's handlers under the same names)."""
    lib = ctypes.cdll.LoadLibrary(str(path))
    for name in TARGETS:
        jax.ffi.register_ffi_target(name, jax.ffi.pycapsule(getattr(lib, name)), platform="cpu")


def load() -> KernelStatus:
    """Builds (once), loads and registers the kernels with XLA; returns whether they can be used."""
    global _status
    with _lock:
        if _status is not None:
            return _status
        if os.environ.get("GRADAX_DISABLE_KERNELS", "") not in ("", "0"):
            _status = KernelStatus(False, "disabled by GRADAX_DISABLE_KERNELS", "")
            return _status
        cc = _compiler()
        if cc is None:
            cc_env = os.environ.get("CC")
            wanted = f"CC={cc_env!r} is not an executable" if cc_env else "set CC, or install gcc or clang"
            _status = KernelStatus(False, f"no C compiler found ({wanted})", "")
            return _status
        try:
            path, note = _build(cc)
            _register(path)
        except Exception as err:  # a failed build or load leaves the XLA implementation in use
            _status = KernelStatus(False, f"{type(err).__name__}: {err}", "")
            return _status
        _status = KernelStatus(True, "", str(path), note)
        return _status


# Leaves per kernel call. XLA's compile time grows with the square of the operands and aliases of one custom call
# (layout assignment and alias analysis scan them per operand): 400 leaves in one call compile in 4.2 s, in calls of
# 50 in 0.4 s. The calls of one step run one after another, each over all threads.
LEAVES_PER_CALL = 32


# When a kernel takes a step, and how it gets vmap and autodiff: here, where gradax.fused, the optimizers, contrib
# and the linear algebra all import them without a cycle.


def one_device_view() -> bool:
    """Whether the step sees whole arrays of one device: a single-device process, or inside ``shard_map`` over every
    mesh axis (local shards). Under a GSPMD-partitioned ``jit`` the kernel (an opaque custom call) would make XLA
    gather every operand onto each device, so the step is left to XLA there."""
    if jax.device_count() == 1:
        return True
    mesh = jax.sharding.get_abstract_mesh()
    return not mesh.empty and set(mesh.axis_names) == set(mesh.manual_axes)


def kernel_applies() -> bool:
    """Whether a CPU kernel can take this step: CPU backend, no x64, whole arrays, kernels built."""
    return (
        jax.default_backend() == "cpu"
        and not jax.config.jax_enable_x64  # pyrefly: ignore[missing-attribute] - a flag made at run time
        and one_device_view()
        and load().available
    )


def with_reference(kernel: Callable, reference: Callable) -> Callable:
    """``kernel(params, state, grads)``, batched by ``vmap`` and differentiated as ``reference`` (the kernel is one
    unbatched pass with no derivative of its own; the reference computes the same numbers in jnp)."""

    @jax.custom_batching.custom_vmap
    def batchable(params: Any, state: Any, grads: Any):
        return kernel(params, state, grads)

    @batchable.def_vmap
    def _rule(axis_size, in_batched, params, state, grads):
        def full(x, batched):
            return x if batched else jnp.broadcast_to(x, (axis_size, *np.shape(x)))

        args = jax.tree.map(full, (params, state, grads), tuple(in_batched))
        out = jax.vmap(reference)(*args)
        return out, jax.tree.map(lambda _: True, out)

    @jax.custom_jvp
    def step(params: Any, state: Any, grads: Any):
        return batchable(params, state, grads)

    @step.defjvp
    def _jvp(primals, tangents):
        return jax.jvp(reference, primals, tangents)

    return step


def _chunks(n: int, size: int) -> list[slice]:
    return [slice(k, min(n, k + size)) for k in range(0, n, size)]


def _require() -> None:
    """Builds and registers the kernels with XLA on first use; raises when they cannot be used here."""
    status = load()
    if not status.available:
        raise RuntimeError(f"gradax's CPU kernels are not available: {status.reason}")


def _call_per_leaves(target, head, groups, results, size=LEAVES_PER_CALL, carry=()):
    """``target`` called once per ``size`` leaves: the operands are ``head(chunk)`` (a slice of leaf indices), then
    the ``carry`` arrays, then each of ``groups`` (lists of per-leaf arrays, one entry per leaf) sliced to the chunk,
    group after group. The first results are the new ``carry`` (aliased, in place), handed to the next call.

    ``results`` lists, per result group, the index ``k`` of the operand group whose buffers it takes (each leaf's
    result has the shape, dtype and buffer of its operand in ``groups[k]``: in place). Returns one list per result
    group, then the final ``carry`` when there is one.
    """
    _require()
    outs: list = [[] for _ in results]
    carry = list(carry)
    for part in _chunks(len(groups[0]), size):
        lead = list(head(part))
        chunk = [group[part] for group in groups]
        n = part.stop - part.start
        aliases = {len(lead) + k: k for k in range(len(carry))}
        shapes = [jax.ShapeDtypeStruct(x.shape, x.dtype) for x in carry]
        lead += carry
        for k in results:
            for i, x in enumerate(chunk[k]):
                aliases[len(lead) + k * n + i] = len(shapes)
                shapes.append(jax.ShapeDtypeStruct(x.shape, x.dtype))
        out = jax.ffi.ffi_call(target, shapes, input_output_aliases=aliases)(
            *lead, *(x for group in chunk for x in group)
        )
        carry, start = list(out[: len(carry)]), len(carry)
        for k in range(len(results)):
            outs[k] += out[start : start + n]
            start += n
    return outs + carry


def adamw_step(
    scalars: jax.Array, weight_decay: jax.Array, params: list, grads: list, mu: list, nu: list
) -> tuple[list, list, list]:
    """One in-place AdamW pass over the leaves: returns the new params, first and second moments.

    Each leaf's params and grads are float32 or bfloat16 (alike), its moments float32. ``scalars`` is
    float32[len(ADAMW_SCALARS)], ``weight_decay`` float32[len(params)]. The results alias the params and moments
    (donate them to update in place; otherwise XLA copies them first).
    """
    head = lambda part: (scalars, weight_decay[part])
    return tuple(_call_per_leaves("gradax_adamw_step", head, [params, grads, mu, nu], [0, 2, 3]))


# Leaves per call of the flat-moment kernel: it aliases n + 2 buffers per call where the per-leaf one aliases 3n, and
# for trees of thousands of small leaves fewer calls are a shorter step (measured: 3,000 leaves of 3,333 params,
# 21-24 ms per step against 23-29 ms with 32; compile time unchanged at 3,000 and 10,000 leaves).
FLAT_LEAVES_PER_CALL = 128


def _flat_head(scalars: jax.Array, per_leaf: jax.Array, params: list):
    """The leading operands of a flat-state kernel's call over a chunk of leaves: the scalars, the chunk's per-leaf
    values, and where its first leaf starts in the flat state, as int32[2] (low 31 bits, then the rest)."""
    offsets = np.cumsum([0] + [int(np.prod(np.shape(p))) for p in params])

    def head(part):
        start = int(offsets[part.start])
        return (scalars, per_leaf[part], jnp.asarray([start & 0x7FFFFFFF, start >> 31], jnp.int32))

    return head


def adamw_flat_step(
    scalars: jax.Array, weight_decay: jax.Array, mu: jax.Array, nu: jax.Array, params: list, grads: list
) -> tuple[list, jax.Array, jax.Array]:
    """:func:`adamw_step` where the moments are two flat float32 vectors (``gradax.flatten``'s state): leaf ``i``'s
    moments are the slice after leaf ``i - 1``'s. Returns the new params and the two flat moments (aliased)."""
    head = _flat_head(scalars, weight_decay, params)
    new_p, mu, nu = _call_per_leaves(
        "gradax_adamw_flat_step", head, [params, grads], [0], carry=(mu, nu), size=FLAT_LEAVES_PER_CALL
    )
    return new_p, mu, nu


def lion_flat_step(
    scalars: jax.Array, decay: jax.Array, mu: jax.Array, params: list, grads: list
) -> tuple[list, jax.Array]:
    """:func:`lion_step` where the momentum is one flat vector (``gradax.flatten``'s state): leaf ``i``'s momentum is
    the slice after leaf ``i - 1``'s. Returns the new params and the flat momentum (aliased)."""
    head = _flat_head(scalars, decay, params)
    new_p, mu = _call_per_leaves(
        "gradax_lion_flat_step", head, [params, grads], [0], carry=(mu,), size=FLAT_LEAVES_PER_CALL
    )
    return new_p, mu


def adamw8_step(
    scalars: jax.Array, weight_decay: jax.Array, seed: jax.Array, params: list, grads: list, mu: list, nu: list
) -> tuple[list, list, list]:
    """One in-place AdamW pass over float32 leaves whose moments are ``gradax.BlockQuantized`` (8-bit codes and
    block scales): returns the new params, first and second moments (``BlockQuantized``).

    ``seed`` is int32[1], the stochastic-rounding seed (one hash per element for both moments, as
    ``gradax._quantization.dither_pair``). The results alias the params, codes and scales.
    """
    head = lambda part: (scalars, weight_decay[part], seed)
    groups = [params, grads, [q.codes for q in mu], [q.scale for q in mu], [q.codes for q in nu], [q.scale for q in nu]]
    p, m_codes, m_scale, v_codes, v_scale = _call_per_leaves("gradax_adamw8_step", head, groups, [0, 2, 3, 4, 5])
    quantized = lambda codes, scale: [BlockQuantized(*x) for x in zip(codes, scale, strict=True)]
    return p, quantized(m_codes, m_scale), quantized(v_codes, v_scale)


def lion_step(scalars: jax.Array, decay: jax.Array, params: list, grads: list, mu: list) -> tuple[list, list]:
    """One in-place Lion pass over the leaves: returns the new params and momentum.

    Each leaf's params and grads are float32 or bfloat16 (alike), its momentum float32, or bfloat16 with bfloat16
    params. ``scalars`` is float32[len(LION_SCALARS)], ``decay`` float32[len(params)] (1 where a leaf is decayed).
    The results alias the params and momentum (donate them to update in place; otherwise XLA copies them first).
    """
    head = lambda part: (scalars, decay[part])
    return tuple(_call_per_leaves("gradax_lion_step", head, [params, grads, mu], [0, 2]))


def adafactor_matrices(scalars: jax.Array, params: list, grads: list, row_factors: list, col_factors: list) -> list:
    """The update of float32 matrices ``[R, C]`` by Adafactor's factored second moment, in place: returns the new
    params, ``p - ((((g x) y) s1) s2) s3`` with ``x`` the normalized factor and ``y`` the other (the per-row factor
    float32[R] and the per-column factor float32[C] of ``row_factors`` and ``col_factors``, each ``x`` or ``y`` as
    leaf ``i``'s row of ``scalars`` says).

    ``scalars`` is float32[n, len(ADAFACTOR_SCALARS)], a row per leaf. The results alias the params.

    One call per leaf: XLA then runs each leaf's parameter RMS and this pass close together, the parameters still in
    the cache for the second reading (calls of 32 leaves came after all their RMS reductions: the step at full GPT-2
    size 1.16x ``update`` + ``apply_updates``'s, against 1.01-1.04x now)."""
    head = lambda part: (scalars[part],)
    groups = [params, grads, row_factors, col_factors]
    (new_params,) = _call_per_leaves("gradax_adafactor_matrices", head, groups, [0], size=1)
    return new_params


def mars_step(
    scalars: jax.Array, decay: jax.Array, params: list, grads: list, mu: list, nu: list, last: list
) -> tuple[list, list, list, list]:
    """One in-place MARS-AdamW step over float32 leaves: each leaf's norm of the corrected gradient (a read-only
    pass), then the update; returns the new params, first and second moments and kept gradients (``last_grad``).

    ``scalars`` is float32[len(MARS_SCALARS)], ``decay`` float32[len(params)] (1 where a leaf is decayed). The
    results alias the params and state (donate them to update in place; otherwise XLA copies them first). Each call
    takes whole leaves, so each leaf's norm is complete within it.
    """
    head = lambda part: (scalars, decay[part])
    return tuple(_call_per_leaves("gradax_mars_step", head, [params, grads, mu, nu, last], [0, 2, 3, 4]))


def cautious_adamw_step(
    scalars: jax.Array, decay: jax.Array, params: list, grads: list, mu: list, nu: list
) -> tuple[list, list, list]:
    """One in-place ``cautious(adamw)`` step over float32 leaves: a read-only pass counting each leaf's elements
    whose update agrees with the gradient, then the AdamW pass keeping only those, rescaled. Returns the new params,
    first and second moments.

    ``scalars`` is float32[len(CAUTIOUS_ADAMW_SCALARS)], ``decay`` float32[len(params)] (1 where a leaf is
    decayed). The results alias the params and moments (donate them to update in place; otherwise XLA copies them
    first). Each call takes whole leaves, so each leaf's count is complete within it.
    """
    head = lambda part: (scalars, decay[part])
    return tuple(_call_per_leaves("gradax_cautious_adamw_step", head, [params, grads, mu, nu], [0, 2, 3]))


def came_matrices(scalars: jax.Array, grads: list, mu: list, rows: list, cols: list, res_rows: list, res_cols: list):
    """CAME's momentum and statistics on float32 matrices (``fused_factored.c``): leaf ``i``'s gradient and momentum
    ``[..., R, C]`` (a matrix per index of the leading axes), its second moment's row and column statistics
    ``[..., R]`` and ``[..., C]``, its instability's ``[..., R]`` and ``[..., C]``. Returns the new momentum,
    statistics and instability, five lists (aliased to their operands: donate them to update in place, otherwise
    XLA copies them first); the update itself is left to XLA (see the kernel).

    ``scalars`` is float32[len(CAME_SCALARS)]. Each call takes whole leaves, :data:`LEAVES_PER_CALL` at a time."""
    groups = [grads, mu, rows, cols, res_rows, res_cols]
    return tuple(_call_per_leaves("gradax_came_matrices", lambda part: (scalars,), groups, [1, 2, 3, 4, 5]))


def factored_moments(scalars: jax.Array, normalize_rows: list[bool], grads: list, rows: list, cols: list):
    """Adafactor's factored second moment of float32 matrices (``fused_factored.c``, its pass A): leaf ``i``'s gradient
    ``[..., R, C]``, its row statistic ``[..., R]`` (the mean over ``C``) and column statistic ``[..., C]``; the one
    divided by its mean is the row statistic where ``normalize_rows[i]``. Returns the new row and column statistics
    (two lists, aliased to their operands) and each leaf's sum of squares of the unclipped update (a list of float32
    scalars).

    ``scalars`` is float32[len(FACTORED_SCALARS)]. Each call takes whole leaves, :data:`LEAVES_PER_CALL` at a time."""
    _require()
    new_rows: list = []
    new_cols: list = []
    sums: list = []
    for part in _chunks(len(grads), LEAVES_PER_CALL):
        g, r, c = grads[part], rows[part], cols[part]
        n = len(g)
        shapes = [jax.ShapeDtypeStruct(x.shape, jnp.float32) for x in (*r, *c)]
        shapes.append(jax.ShapeDtypeStruct((n,), jnp.float32))
        aliases = {2 + n + i: i for i in range(2 * n)}
        flags = jnp.asarray(normalize_rows[part], jnp.float32)
        out = jax.ffi.ffi_call("gradax_factored_moments", shapes, input_output_aliases=aliases)(
            scalars, flags, *g, *r, *c
        )
        new_rows += out[:n]
        new_cols += out[n : 2 * n]
        sums += [out[2 * n][i] for i in range(n)]
    return new_rows, new_cols, sums


_answers: dict[str, bool] = {}


def _library_says(function: str) -> bool:
    """Whether the kernels are built and the library's ``int function(void)`` returns true (asked once)."""
    if function not in _answers:
        status = load()
        _answers[function] = status.available and bool(getattr(ctypes.cdll.LoadLibrary(status.path), function)())
    return _answers[function]


def amx_available() -> bool:
    """Whether the kernels are built and this CPU and process can use Intel AMX's bfloat16 tile products (asked once:
    the CPU's AMX-TILE and AMX-BF16, the OS saving the tile state, Linux granting this process the tile data)."""
    return _library_says("gradax_amx_available")


def avx512_available() -> bool:
    """Whether the kernels are built and this CPU has AVX-512 (with the OS saving its state; asked once)."""
    return _library_says("gradax_avx512_available")


def avx512_bf16_available() -> bool:
    """Whether the kernels are built and this CPU has AVX-512 BF16's dot products (VDPBF16PS, with AVX-512 F, BW
    and VL; the OS saving the AVX-512 state; asked once): AMD Zen 4 and later, Intel Cooper Lake and later."""
    return _library_says("gradax_avx512_bf16_available")


# the kernel's flag for each way of running the bfloat16 products of newton_schulz
BF16_PRODUCTS = {"portable": 0, "amx": 1, "avx512_bf16": 2}


def bf16_products() -> str | None:
    """The fastest way this CPU runs :func:`newton_schulz`'s products: ``"amx"`` (Intel AMX tiles),
    ``"avx512_bf16"`` (AVX-512 BF16 dot products), or None where it has neither (or the kernels are not built)."""
    if amx_available():
        return "amx"
    if avx512_bf16_available():
        return "avx512_bf16"
    return None


def newton_schulz(x: jax.Array, coeffs: jax.Array, transposed: bool, products: str) -> jax.Array:
    """Muon's quintic Newton-Schulz iteration with bfloat16 products accumulated in float32, a matrix at a time in the
    cache (``fused_newton_schulz.c``): ``x`` float32[..., r, c], iterated on ``x^T`` when ``transposed``;
    ``coeffs`` float32[steps, 3], a row ``(a, b, c)`` per step. ``products`` (a key of :data:`BF16_PRODUCTS`)
    runs the products on AMX tiles (``"amx"``, see :func:`amx_available`), with AVX-512 BF16 (``"avx512_bf16"``,
    see :func:`avx512_bf16_available`), or in plain C (``"portable"``: slow, the same packing and order of work,
    for tests).

    Batched by ``vmap`` (the kernel takes a batch of matrices); no derivative of its own."""
    _require()
    if products not in BF16_PRODUCTS:
        raise ValueError(f"products must be one of {sorted(BF16_PRODUCTS)}, got {products!r}")
    flags = jnp.asarray([int(transposed), BF16_PRODUCTS[products]], jnp.int32)
    call = jax.ffi.ffi_call(
        "gradax_newton_schulz", jax.ShapeDtypeStruct(x.shape, jnp.float32), vmap_method="expand_dims"
    )
    return call(jnp.asarray(x, jnp.float32), jnp.asarray(coeffs, jnp.float32), flags)


def inverse_pth_root(matrix: jax.Array, v0: jax.Array, params: jax.Array, avx512: bool) -> tuple[jax.Array, jax.Array]:
    """The coupled Newton iteration of :func:`gradax.matrix_inverse_pth_root`, a matrix at a time in the cache
    (``fused_inverse_root.c``): ``matrix`` float32[..., n, n] (symmetric), ``v0`` float32[n] the power iteration's
    unit start vector, ``params`` float32[4]: ridge_epsilon, error_tolerance, p, num_iters. ``avx512`` runs the
    products with AVX-512 (see :func:`avx512_available`), otherwise in plain C (slow: the same order of work and
    roundings, for tests). Returns ``(roots, errors)``.

    Batched by ``vmap`` (the kernel takes a batch of matrices); no derivative of its own."""
    _require()
    matrix = jnp.asarray(matrix, jnp.float32)
    call = jax.ffi.ffi_call(
        "gradax_inverse_pth_root",
        (jax.ShapeDtypeStruct(matrix.shape, jnp.float32), jax.ShapeDtypeStruct(matrix.shape[:-2], jnp.float32)),
        vmap_method="expand_dims",
    )
    flags = jnp.asarray([int(avx512)], jnp.int32)
    roots, errors = call(matrix, jnp.asarray(v0, jnp.float32), jnp.asarray(params, jnp.float32), flags)
    return roots, errors
