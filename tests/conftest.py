"""Shared fixtures: fresh random inputs every run (reproducible through TEST_SEED), GPU-marker skipping, and the CPU
suite's compile settings and file order (it is mostly XLA compiling small programs on 2 cores)."""

import os
import secrets
import shutil
import zlib

from tests import compile_cache

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # leave GPU memory for torch in the parity tests
# Pallas's Mosaic GPU interpreter runs each warpgroup of a two-warpgroup program (SsdConfig.fwd_walk_warpgroups) as a
# computation that holds a thread of XLA's CPU pool while it waits at a barrier, beside the program's own computation:
# with the pool's default of a thread a CPU, a 2-CPU machine can hang there (``interpreter_threads`` in
# pallas_kernels/_triton.py). One thread to spare; read when JAX starts its CPU client, by xdist's workers too.
os.environ.setdefault("PJRT_NPROC", str(max(4, len(os.sched_getaffinity(0)))))
# Every compiled program is cached on disk for this session, its subprocesses and the next sessions
# (tests/compile_cache.py): many small trainings compile the same step again, each of xdist's processes and each
# subprocess the same small eager operations, and a second run of an unchanged suite compiles nothing. Each test
# still traces and runs its own.
_PERSISTENT_CACHE = compile_cache.configure()
# Without a GPU, most tests' time is XLA compiling small CPU programs (eager ops one by one, tiny trainings of a few
# steps): without LLVM's optimizations they compile about a quarter faster (this process and its subprocesses). Tests
# marked ``slow`` spend their time running what they compiled (hundreds of training steps, 2.4-3.4x slower unoptimized)
# and get the optimizations back (``_xla_optimizations``). GPU machines keep them everywhere.
if shutil.which("nvidia-smi") is None:
    os.environ.setdefault("JAX_DISABLE_MOST_OPTIMIZATIONS", "1")  # inherited by pytest-xdist's workers too
COMPILE_FAST = os.environ.get("JAX_DISABLE_MOST_OPTIMIZATIONS") == "1"

import jax  # noqa: E402  (after the environment above, which JAX reads when imported)
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from tests import interpreter_callbacks, tiers  # noqa: E402

# The Mosaic GPU kernels' tests are mostly the interpreter's callbacks: hand them their arguments the cheap way, and
# run CPU computations inline so that their own eager operations don't queue behind the test's (before JAX starts).
interpreter_callbacks.dispatch_inline()
interpreter_callbacks.install()

# In the environment, so that pytest-xdist's workers (started after this import) draw from the same seed.
SESSION_SEED = int(os.environ.setdefault("TEST_SEED", str(secrets.randbelow(2**31))))


def pytest_report_header(config):
    cache = (
        f"compilation cache: {_PERSISTENT_CACHE} (kept between runs; JAX_MAMBA_TEST_CACHE=off keeps none)"
        if _PERSISTENT_CACHE is not None
        else "compilation cache: this run only (JAX_MAMBA_TEST_CACHE=off)"
    )
    return [f"TEST_SEED={SESSION_SEED} (set TEST_SEED to replay these random inputs)", cache]


def pytest_terminal_summary(terminalreporter):
    """Also at the end, where ``-q`` runs (CI) show it: a failure on random inputs can then be replayed."""
    terminalreporter.write_line(f"TEST_SEED={SESSION_SEED} (set TEST_SEED to replay these random inputs)")


def pytest_sessionfinish(session):
    """The run's controller (not an xdist worker) keeps the persistent cache within its bound."""
    if _PERSISTENT_CACHE is not None and not hasattr(session.config, "workerinput"):
        compile_cache.prune(_PERSISTENT_CACHE, compile_cache.max_bytes())


def _has_gpu() -> bool:
    try:
        return bool(jax.devices("gpu"))
    except RuntimeError:
        return False


# The longest test files (minutes each on 2 cores), longest first: `make test` hands whole files to its processes in
# collection order (--no-loadscope-reorder), so these start first and no process is left running one alone at the end.
LONGEST_FILES = (
    "jax_mamba/test_induction_heads.py",
    "jax_mamba/test_train_graph.py",
    "jax_mamba/test_multi_device.py",
    "pallas_kernels/ssd/test_kernels.py",
    "compare/parity/test_check.py",
    "pallas_kernels/test_selective_scan_pallas.py",
    "jax_mamba/test_train.py",
    "jax_mamba/test_train_vision.py",
)


def _file_rank(item) -> int:
    path = item.nodeid.split("::")[0]
    return next((i for i, name in enumerate(LONGEST_FILES) if path.endswith(name)), len(LONGEST_FILES))


def _mark_quick_tier(config, items) -> None:
    """Mark ``tiers.QUICK``'s tests ``quick``. Where whole files were collected, a listed test missing from one of
    them (renamed, or its parameters changed) stops the run: the tier cannot shrink unnoticed."""
    wanted = set(tiers.QUICK)
    for item in items:
        if item.nodeid in wanted:
            item.add_marker(pytest.mark.quick)
    if any("::" in arg for arg in config.args):  # single tests asked for: the rest of their files is not collected
        return
    files = {item.nodeid.split("::")[0] for item in items}
    missing = sorted(n for n in wanted.difference(item.nodeid for item in items) if n.split("::")[0] in files)
    if missing:
        raise pytest.UsageError(f"tests/tiers.py QUICK lists tests that do not exist: {', '.join(missing)}")


def pytest_collection_modifyitems(config, items):
    items.sort(key=_file_rank)  # stable: the rest keep their order
    _mark_quick_tier(config, items)
    if _has_gpu():
        return
    skip = pytest.mark.skip(reason="needs a GPU; JAX found none")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _xla_flags_kept():
    """Fail a test that leaves ``XLA_FLAGS`` changed (and put them back): they would change what every later test of
    its process compiles, and JAX hashes them into the cache key of every program, so that none of those would be
    found in the cache the next time (``monkeypatch.setenv`` restores them)."""
    before = os.environ.get("XLA_FLAGS")
    yield
    after = os.environ.get("XLA_FLAGS")
    if after != before:
        if before is None:
            del os.environ["XLA_FLAGS"]
        else:
            os.environ["XLA_FLAGS"] = before
        pytest.fail(f"the test left XLA_FLAGS changed, {before!r} -> {after!r}: set them with monkeypatch.setenv")


@pytest.fixture(autouse=True)
def _xla_optimizations(request):
    """XLA's optimizations back on for the ``slow`` tests (see COMPILE_FAST)."""
    if not COMPILE_FAST or request.node.get_closest_marker("slow") is None:
        yield
        return
    jax.config.update("jax_disable_most_optimizations", False)
    try:
        yield
    finally:
        jax.config.update("jax_disable_most_optimizations", True)


@pytest.fixture
def rng(request) -> np.random.Generator:
    """A generator seeded by the session seed and the test's id: new inputs each run, distinct per test case."""
    return np.random.default_rng([SESSION_SEED, zlib.crc32(request.node.nodeid.encode())])


@pytest.fixture(scope="session")
def cpu_reference():
    """mamba-ssm with its CPU fallbacks (stub CUDA module, its own torch reference functions)."""
    from tests.reference_fixtures import reference_for

    return reference_for("cpu")


@pytest.fixture(scope="session")
def cuda_reference():
    """mamba-ssm at its best on the GPU (built CUDA extensions, Triton); skips without a GPU build."""
    from tests.reference_fixtures import reference_for

    return reference_for("cuda")


@pytest.fixture(scope="session")
def cuda_triton_reference():
    """mamba-ssm on the GPU for tests of its Triton kernels only (the SSD): its CUDA build where there is one, else
    the sdist unpacked by ``python -m torch_reference.build --unpack-only`` with the extensions stubbed."""
    from tests.reference_fixtures import reference_for

    return reference_for("cuda", require_extensions=False)
