"""The CUDA builder's machine-independent half: fetching and unpacking the pinned sdists, and refusing to build
without a GPU. (The build itself runs on the GPU machine: python -m torch_reference.build.)"""

import io
import re

import numpy as np
import pytest

pytest.importorskip("torch", reason="the PyTorch side is not installed (make setup-torch)")


def test_sources_are_fetched_unpacked_and_complete(tmp_path, monkeypatch):
    from torch_reference import build
    from torch_reference.paths import source_dir

    monkeypatch.setenv("JAX_MAMBA_TORCH_CACHE", str(tmp_path))
    build.prepare_sources(None)  # pip download of the two sdists into the cache, then unpack
    for name in ("selective_scan_cuda", "causal_conv1d_cuda"):
        sources, includes = build.extension_sources(name)
        assert sources and all(s.is_file() for s in sources) and all(i.is_dir() for i in includes)
    assert (source_dir("mamba_ssm") / "mamba_ssm" / "__init__.py").is_file()
    build.prepare_sources(None)  # a second call reuses what is there


def test_missing_offline_sdist_is_a_clear_error(tmp_path, monkeypatch):
    from torch_reference import build

    monkeypatch.setenv("JAX_MAMBA_TORCH_CACHE", str(tmp_path / "cache"))
    with pytest.raises(FileNotFoundError, match=re.escape("expected the PyPI sdist mamba_ssm-2.3.2.post1.tar.gz")):
        build.prepare_sources(tmp_path / "empty")


def test_build_needs_a_gpu():
    import torch

    from torch_reference import build

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible")
    with pytest.raises(RuntimeError, match="needs a GPU"):
        build.build()


def test_unknown_extension_names_are_refused():
    from torch_reference import build

    with pytest.raises(ValueError, match="subset of"):
        build.build(extensions=("selective_scan", "causal_conv1d_cuda"))


def test_unpack_only_needs_no_gpu_and_makes_mamba_ssm_importable_from_the_cache(tmp_path, monkeypatch, capsys):
    """``--unpack-only`` unpacks the sdists of --sdist-dir into the cache (here two small stand-ins named as PyPI's)."""
    import tarfile

    from torch_reference import build
    from torch_reference.paths import SDISTS, source_dir

    sdists = tmp_path / "sdists"
    sdists.mkdir()
    for package, folder in SDISTS.items():
        init = tmp_path / folder / package / "__init__.py"
        init.parent.mkdir(parents=True)
        init.write_text("")
        with tarfile.open(sdists / f"{folder}.tar.gz", "w:gz") as tar:
            tar.add(tmp_path / folder, arcname=folder)
    monkeypatch.setenv("JAX_MAMBA_TORCH_CACHE", str(tmp_path / "cache"))
    assert build.main(["--unpack-only", "--sdist-dir", str(sdists)]) == 0
    assert (source_dir("mamba_ssm") / "mamba_ssm" / "__init__.py").is_file()
    assert "unpacked into" in capsys.readouterr().out
    assert not any((tmp_path / "cache").glob("build"))  # nothing compiled


def test_builds_carried_as_xz_parts(tmp_path, monkeypatch):
    """--export's parts hold every build folder's manifest and .so files, read back by --import's unpacking and
    by ``cat parts | xz -d | tar -x``; a folder without parts is a clear error."""
    import lzma
    import tarfile

    from torch_reference import build_parts

    monkeypatch.setenv("JAX_MAMBA_TORCH_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "cache" / "build" / "torch2.9.0-cu12.8-sm90"
    (folder / "selective_scan_cuda").mkdir(parents=True)
    (folder / "manifest.json").write_text('{"extensions": {}}')
    payload = np.random.default_rng(0).bytes(300_000)  # incompressible: several parts of 100 kB
    (folder / "selective_scan_cuda" / "selective_scan_cuda.so").write_bytes(payload)
    (folder / "selective_scan_cuda" / "build.ninja").write_text("not carried")
    parts = build_parts.export_parts(tmp_path / "out", part_bytes=100_000)
    assert [p.name[-2:] for p in parts] == ["aa", "ab", "ac", "ad"][: len(parts)] and len(parts) >= 3
    whole = lzma.decompress(b"".join(p.read_bytes() for p in parts))
    with tarfile.open(fileobj=io.BytesIO(whole)) as tar:
        assert sorted(tar.getnames()) == [
            "torch2.9.0-cu12.8-sm90/manifest.json",
            "torch2.9.0-cu12.8-sm90/selective_scan_cuda/selective_scan_cuda.so",
        ]
    monkeypatch.setenv("JAX_MAMBA_TORCH_CACHE", str(tmp_path / "elsewhere"))
    assert len(build_parts.import_parts(tmp_path / "out")) == 2
    copied = tmp_path / "elsewhere" / "build" / "torch2.9.0-cu12.8-sm90"
    assert (copied / "selective_scan_cuda" / "selective_scan_cuda.so").read_bytes() == payload
    with pytest.raises(FileNotFoundError, match=re.escape("no torch-build.tar.xz.part-* files in")):
        build_parts.import_parts(tmp_path)
