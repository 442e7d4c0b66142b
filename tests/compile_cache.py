"""The test suite's compilation cache: every program the tests compile is kept on disk between runs, so that a
second run compiles only what changed.

JAX keys an entry by the program (its StableHLO, source locations left out), the compile options and flags, the
device kind and the jax, jaxlib and XLA versions: an entry is only ever loaded for the same program, and a changed
kernel or model compiles afresh. Interpreted Pallas kernels are cached like any other program (their callbacks into
Python are handed over again when an entry is loaded).

Environment (read by ``configure`` before JAX starts):

- ``JAX_MAMBA_TEST_CACHE_DIR``: the folder (default ``$XDG_CACHE_HOME/jax-mamba/test-compilation-cache``, with
  ``~/.cache`` where ``XDG_CACHE_HOME`` is unset);
- ``JAX_MAMBA_TEST_CACHE=off``: nothing kept between runs (a temporary folder for the one run, removed at its end);
- ``JAX_MAMBA_TEST_CACHE_MAX_MB``: the folder's bound (default ``DEFAULT_MAX_MB``). At the end of a run, entries
  are deleted least recently used first (by access time, or write time where that is later) until it fits.

``python -m tests.compile_cache`` prints the folder and its size; ``--clear`` deletes it (``make clean-test-cache``).
"""

import argparse
import atexit
import os
import shutil
import tempfile
from pathlib import Path

DEFAULT_MAX_MB = 2048
RUN_FOLDER = "JAX_MAMBA_TEST_RUN_CACHE"  # the temporary folder of a run with the persistent cache off


def folder() -> Path | None:
    """Where compiled programs persist, or None when ``JAX_MAMBA_TEST_CACHE=off``."""
    if os.environ.get("JAX_MAMBA_TEST_CACHE", "").strip().lower() in {"off", "0", "false", "no"}:
        return None
    if chosen := os.environ.get("JAX_MAMBA_TEST_CACHE_DIR"):
        return Path(chosen).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "jax-mamba" / "test-compilation-cache"


def max_bytes() -> int:
    value = os.environ.get("JAX_MAMBA_TEST_CACHE_MAX_MB", str(DEFAULT_MAX_MB))
    try:
        megabytes = float(value)
    except ValueError:
        raise ValueError(f"JAX_MAMBA_TEST_CACHE_MAX_MB must be a number of megabytes, got {value!r}") from None
    if megabytes <= 0:
        raise ValueError(f"JAX_MAMBA_TEST_CACHE_MAX_MB must be positive, got {value!r}")
    return int(megabytes * 2**20)


def configure() -> Path | None:
    """Point JAX's compilation cache at the folder (every program, however quick to compile: most of the suite's
    programs take well under JAX's default threshold of a second) for this process and the processes it starts.
    Returns the persistent folder, or None when it is off (then a temporary folder serves this run alone)."""
    persistent = folder()
    if persistent is None:
        path = os.environ.get(RUN_FOLDER)  # pytest-xdist's workers share their controller's
        if path is None:
            path = os.environ[RUN_FOLDER] = tempfile.mkdtemp(prefix="jax-mamba-test-cache-")
            atexit.register(shutil.rmtree, path, ignore_errors=True)
    else:
        max_bytes()  # a bad bound stops the run before any test
        persistent.mkdir(parents=True, exist_ok=True)
        path = str(persistent)
    os.environ["JAX_COMPILATION_CACHE_DIR"] = path
    os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
    return persistent


def prune(path: Path, limit: int) -> tuple[int, int]:
    """Delete the least recently used files under ``path`` until their sizes sum to at most ``limit`` bytes; returns
    (files deleted, bytes left). A file's last use is its access time, or its write time where that is later (file
    systems mounted ``noatime`` keep no access times)."""
    files = []
    for file in path.rglob("*"):
        try:
            stat = file.stat()
        except FileNotFoundError:  # removed meanwhile by another process
            continue
        if file.is_file():
            files.append((max(stat.st_atime, stat.st_mtime), stat.st_size, file))
    total = sum(size for _, size, _ in files)
    deleted = 0
    for _, size, file in sorted(files, key=lambda entry: entry[0]):
        if total <= limit:
            break
        file.unlink(missing_ok=True)
        total -= size
        deleted += 1
    return deleted, total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.compile_cache", description=__doc__)
    parser.add_argument("--clear", action="store_true", help="delete the folder and everything in it")
    args = parser.parse_args(argv)
    path = folder()
    if path is None:
        print("JAX_MAMBA_TEST_CACHE=off: no folder is kept between runs")
        return 0
    files = [file for file in path.rglob("*") if file.is_file()] if path.is_dir() else []
    size = sum(file.stat().st_size for file in files)
    print(f"{path}: {len(files)} files, {size / 2**20:.1f} MB (bound {max_bytes() / 2**20:.0f} MB)")
    if args.clear and path.is_dir():
        shutil.rmtree(path)
        print(f"deleted {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
