"""tests/compile_cache.py: where the suite's compiled programs persist, how it is turned off, and the pruning that
keeps the folder within its bound, least recently used first."""

import os
from pathlib import Path

import pytest

from tests import compile_cache


def test_the_folder_follows_the_environment(monkeypatch, tmp_path):
    for name in ("JAX_MAMBA_TEST_CACHE", "JAX_MAMBA_TEST_CACHE_DIR", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    assert compile_cache.folder() == Path.home() / ".cache" / "jax-mamba" / "test-compilation-cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert compile_cache.folder() == tmp_path / "xdg" / "jax-mamba" / "test-compilation-cache"
    monkeypatch.setenv("JAX_MAMBA_TEST_CACHE_DIR", str(tmp_path / "chosen"))
    assert compile_cache.folder() == tmp_path / "chosen"
    for off in ("off", "OFF", "0", "false"):
        monkeypatch.setenv("JAX_MAMBA_TEST_CACHE", off)
        assert compile_cache.folder() is None


def test_configure_points_jax_at_the_folder_or_at_one_folder_for_the_run(monkeypatch, tmp_path):
    monkeypatch.setattr(os, "environ", dict(os.environ))  # what configure sets stays in this test
    for name in ("JAX_COMPILATION_CACHE_DIR", "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", compile_cache.RUN_FOLDER):
        os.environ.pop(name, None)
    monkeypatch.delenv("JAX_MAMBA_TEST_CACHE", raising=False)
    monkeypatch.setenv("JAX_MAMBA_TEST_CACHE_DIR", str(tmp_path / "kept"))
    assert compile_cache.configure() == tmp_path / "kept"
    assert (tmp_path / "kept").is_dir()
    assert os.environ["JAX_COMPILATION_CACHE_DIR"] == str(tmp_path / "kept")
    assert os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] == "0"

    monkeypatch.setenv("JAX_MAMBA_TEST_CACHE", "off")
    assert compile_cache.configure() is None
    run_folder = os.environ["JAX_COMPILATION_CACHE_DIR"]
    assert run_folder != str(tmp_path / "kept") and Path(run_folder).is_dir()
    assert compile_cache.configure() is None  # a worker of the same run: the same folder
    assert os.environ["JAX_COMPILATION_CACHE_DIR"] == run_folder


@pytest.mark.parametrize("value", ["abc", "0", "-5"])
def test_a_bad_bound_is_refused_by_name(monkeypatch, value):
    monkeypatch.setenv("JAX_MAMBA_TEST_CACHE_MAX_MB", value)
    with pytest.raises(ValueError, match="JAX_MAMBA_TEST_CACHE_MAX_MB must be"):
        compile_cache.max_bytes()


def test_prune_deletes_the_least_recently_used_until_the_folder_fits(tmp_path, rng):
    sizes = rng.integers(1, 100, size=12)
    last_use = rng.permutation(12) * 1000.0 + 1e9
    files = []
    for i, (size, used) in enumerate(zip(sizes, last_use, strict=True)):
        file = tmp_path / ("sub" if i % 3 == 0 else "") / f"entry{i}-cache"
        file.parent.mkdir(exist_ok=True)
        file.write_bytes(b"x" * int(size))
        if i % 2:  # read after it was written
            os.utime(file, (used, used - 500))
        else:  # its access time older than its write (a noatime mount)
            os.utime(file, (used - 500, used))
        files.append((used, int(size), file))
    limit = int(sum(sizes) // 2)
    deleted, left = compile_cache.prune(tmp_path, limit)

    kept, total, expect_deleted = [], int(sum(sizes)), 0
    for _, size, file in sorted(files, key=lambda entry: entry[0]):
        if total > limit:
            total -= size
            expect_deleted += 1
        else:
            kept.append(file)
    assert (deleted, left) == (expect_deleted, total)
    assert left <= limit
    assert sorted(p for p in tmp_path.rglob("*") if p.is_file()) == sorted(kept)
    assert compile_cache.prune(tmp_path, limit) == (0, left)  # within its bound: nothing more to delete


def test_the_command_reports_and_clears_the_folder(monkeypatch, tmp_path, capsys):
    monkeypatch.delenv("JAX_MAMBA_TEST_CACHE", raising=False)
    monkeypatch.setenv("JAX_MAMBA_TEST_CACHE_DIR", str(tmp_path / "kept"))
    (tmp_path / "kept" / "sub").mkdir(parents=True)
    (tmp_path / "kept" / "sub" / "entry-cache").write_bytes(b"x" * 2048)
    assert compile_cache.main([]) == 0
    assert f"{tmp_path / 'kept'}: 1 files, 0.0 MB" in capsys.readouterr().out
    assert (tmp_path / "kept").is_dir()
    assert compile_cache.main(["--clear"]) == 0
    assert not (tmp_path / "kept").exists()
    monkeypatch.setenv("JAX_MAMBA_TEST_CACHE", "off")
    assert compile_cache.main(["--clear"]) == 0
    assert "no folder is kept" in capsys.readouterr().out
