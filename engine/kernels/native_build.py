"""Build the engine's C kernels (engine/kernels/native/*.c) once per machine and load them with ctypes.

Why not a torch C++ extension: these kernels need no torch headers, so the system C compiler builds one in
about a second (a torch extension takes a minute), and ctypes releases the GIL for each call.

The library is compiled for this CPU (-march=native) into a cache folder, under a name that hashes the
source, the flags, the compiler's version and the CPU's feature flags: a changed source or a different
machine builds anew, and later starts only load it. Written to a temporary file and renamed, so processes
that build at once never load a half-written library. No compiler, a failed build or a library that does
not load: a warning, and the callers keep their torch path. ENGINE_NATIVE_KERNELS=0 turns them off.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

logger = logging.getLogger("engine.kernels")

SOURCE_DIR = Path(__file__).parent / "native"
# every fast-math relaxation but -ffast-math itself: linking a shared library with it would set the
# denormals-are-zero mode for the whole process on load
CFLAGS = (
    "-O3", "-march=native", "-mprefer-vector-width=256", "-fno-math-errno", "-fno-trapping-math",
    "-fassociative-math", "-fno-signed-zeros", "-freciprocal-math", "-ffp-contract=fast", "-fPIC", "-shared",
)
BUILD_TIMEOUT_S = 120
DISABLE_ENV = "ENGINE_NATIVE_KERNELS"
CACHE_ENV = "ENGINE_KERNEL_CACHE"

_lock = threading.Lock()
_loaded: dict[str, ctypes.CDLL | None] = {}


def cache_dir() -> Path:
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME")
    if not base:
        try:
            base = str(Path.home() / ".cache")
        except RuntimeError:      # no home directory (a bare service account): the temp folder
            base = tempfile.gettempdir()
    return Path(base) / "auditor-engine" / "kernels"


def native_kernels_enabled() -> bool:
    return os.environ.get(DISABLE_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def load_library(name: str) -> ctypes.CDLL | None:
    """The compiled `native/<name>.c`, built on first use; None where it cannot be had (see the module doc)."""
    if not native_kernels_enabled():
        return None
    with _lock:
        if name not in _loaded:
            _loaded[name] = _build_and_load(name)
        return _loaded[name]


def _build_and_load(name: str) -> ctypes.CDLL | None:
    compiler = os.environ.get("CC") or "cc"
    if shutil.which(compiler) is None:
        logger.warning("no C compiler (%s) found: the engine's native %s kernel is off, the torch path serves",
                       compiler, name)
        return None
    try:
        source = (SOURCE_DIR / f"{name}.c").read_bytes()     # missing from a broken install: a warning too
        target = cache_dir() / f"{name}-{_build_key(compiler, source)}.so"
        if target.is_file() and not _private(target):
            logger.warning("cached kernel %s (or its folder) is not this user's alone; not loading it: the torch "
                           "path serves", target)
            return None
        if target.is_file():
            try:
                return ctypes.CDLL(str(target))
            except OSError:   # truncated or foreign file under our name: build it again
                logger.warning("cached kernel %s does not load; rebuilding it", target)
        _compile(compiler, SOURCE_DIR / f"{name}.c", target)
        return ctypes.CDLL(str(target))
    except (OSError, subprocess.SubprocessError) as exc:
        logger.warning("the engine's native %s kernel could not be built (%s): the torch path serves", name, exc)
        return None


def _build_key(compiler: str, source: bytes) -> str:
    version = subprocess.run([compiler, "--version"], capture_output=True, timeout=30, check=False).stdout
    digest = hashlib.sha256(source + " ".join(CFLAGS).encode() + version + _cpu_flags())
    return digest.hexdigest()[:16]


def _cpu_flags() -> bytes:
    """What -march=native compiles for: the CPU's feature flags (Linux), else nothing more to key on."""
    try:
        for line in Path("/proc/cpuinfo").read_bytes().splitlines():
            if line.startswith((b"flags", b"Features")):
                return line
    except OSError:
        pass
    return b""


def _private(library: Path) -> bool:
    """Loading a library runs its code: only one this user owns, in a folder this user owns, neither writable
    by anyone else (a shared or world-writable cache could be handed a planted library under our name)."""
    return _owned_alone(library) and _owned_alone(library.parent)


def _owned_alone(path: Path) -> bool:
    status = path.stat()
    return status.st_uid == os.getuid() and not status.st_mode & 0o022


def _compile(compiler: str, source: Path, target: Path) -> None:
    target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    if not _owned_alone(target.parent):
        raise OSError(f"the kernel cache {target.parent} is writable by other users")
    handle, partial = tempfile.mkstemp(dir=target.parent, prefix=f".{target.stem}-", suffix=".so")
    os.close(handle)
    try:
        result = subprocess.run([compiler, *CFLAGS, "-o", partial, str(source), "-lpthread"],
                                capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, check=False)
        if result.returncode:
            raise OSError(f"{compiler} exited {result.returncode}: {result.stderr.strip()[-500:]}")
        os.replace(partial, target)
    finally:
        Path(partial).unlink(missing_ok=True)
