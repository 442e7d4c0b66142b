"""Build mamba-ssm's and causal-conv1d's CUDA extensions for this machine's GPU: ``python -m torch_reference.build``.

Compiles ``selective_scan_cuda`` and ``causal_conv1d_cuda`` from the PyPI sdists (mamba-ssm 2.3.2.post1,
causal-conv1d 1.7.0) for the local GPU architecture only, both at once, into a fixed cache folder
(``torch_reference.paths.build_dir``), and writes a manifest that ``torch_reference.backend.load("cuda")`` reads.
A build that exists for this torch/CUDA/GPU is reused. The sdists come from ``--sdist-dir`` (offline) or from
``pip download``. ``--export DIR`` / ``--import DIR`` carry builds between machines (``build_parts``).
"""

import argparse
import json
import multiprocessing
import os
import subprocess
import sys
import tarfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from torch_reference import build_parts
from torch_reference.paths import CAUSAL_CONV1D_VERSION, MAMBA_SSM_VERSION, SDISTS, build_dir, cache_dir, source_dir

_NVCC_FLAGS = [
    "-O3",
    "-std=c++17",
    "--use_fast_math",
    "--expt-relaxed-constexpr",
    "--expt-extended-lambda",
    "-U__CUDA_NO_HALF_OPERATORS__",
    "-U__CUDA_NO_HALF_CONVERSIONS__",
    "-U__CUDA_NO_BFLOAT16_OPERATORS__",
    "-U__CUDA_NO_BFLOAT16_CONVERSIONS__",
    "-U__CUDA_NO_BFLOAT162_OPERATORS__",
    "-U__CUDA_NO_BFLOAT162_CONVERSIONS__",
]
_SELECTIVE_SCAN_SOURCES = (
    ["selective_scan.cpp"]
    + [f"selective_scan_fwd_{t}.cu" for t in ("fp32", "fp16", "bf16")]
    + [f"selective_scan_bwd_{t}_{k}.cu" for t in ("fp32", "fp16", "bf16") for k in ("real", "complex")]
)
_CAUSAL_CONV1D_SOURCES = [
    "causal_conv1d.cpp",
    "causal_conv1d_fwd.cu",
    "causal_conv1d_bwd.cu",
    "causal_conv1d_update.cu",
]


def extension_sources(name: str) -> tuple[list[Path], list[Path]]:
    """(sources, include dirs) of an extension inside the unpacked sdists."""
    if name == "selective_scan_cuda":
        root = source_dir("mamba_ssm") / "csrc" / "selective_scan"
        return [root / s for s in _SELECTIVE_SCAN_SOURCES], [root]
    root = source_dir("causal_conv1d") / "csrc"
    return [root / s for s in _CAUSAL_CONV1D_SOURCES], [root]


def prepare_sources(sdist_dir: Path | None) -> None:
    """Unpack both sdists into the cache (from ``sdist_dir``, else downloaded with pip)."""
    wanted = {
        "mamba_ssm": f"mamba_ssm-{MAMBA_SSM_VERSION}.tar.gz",
        "causal_conv1d": f"causal_conv1d-{CAUSAL_CONV1D_VERSION}.tar.gz",
    }
    download_dir = cache_dir() / "sdist"
    for package, filename in wanted.items():
        if source_dir(package).is_dir():
            continue
        archive = (sdist_dir or download_dir) / filename
        if not archive.is_file():
            if sdist_dir is not None:
                raise FileNotFoundError(f"{archive} not found (expected the PyPI sdist {filename} in --sdist-dir)")
            spec = f"{package.replace('_', '-')}=={filename.split('-')[1].removesuffix('.tar.gz')}"
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "--no-deps",
                    "--no-binary",
                    ":all:",
                    "--no-build-isolation",
                    "-d",
                    str(download_dir),
                    spec,
                ],
                check=True,
            )
        target = source_dir(package).parent
        target.mkdir(parents=True, exist_ok=True)
        with tarfile.open(archive) as tar:
            tar.extractall(target, filter="data")
        if not source_dir(package).is_dir():
            raise FileNotFoundError(f"{archive} did not unpack to {source_dir(package)}")


def _compile(name: str, out_dir: Path, jobs: int) -> dict:
    """Build one extension with torch's JIT builder (ninja); returns its path and build time."""
    os.environ["MAX_JOBS"] = str(jobs)
    from torch.utils.cpp_extension import load

    sources, includes = extension_sources(name)
    out_dir.mkdir(parents=True, exist_ok=True)
    began = time.time()
    load(
        name=name,
        sources=[str(s) for s in sources],
        extra_include_paths=[str(i) for i in includes],
        extra_cflags=["-O3", "-std=c++17"],
        extra_cuda_cflags=_NVCC_FLAGS,
        build_directory=str(out_dir),
        verbose=False,
    )
    return {"path": str(out_dir / f"{name}.so"), "seconds": round(time.time() - began, 1)}


EXTENSIONS = ("selective_scan_cuda", "causal_conv1d_cuda")


def build(
    sdist_dir: Path | None = None,
    jobs: int | None = None,
    force: bool = False,
    extensions: tuple[str, ...] = EXTENSIONS,
) -> Path:
    """Build (or reuse) the extensions for the local GPU; returns the manifest path. Extensions already in the
    manifest are reused unless ``force``; new ones are added to it (``selective_scan_cuda`` alone is what NVlabs'
    MambaVision needs, about 100 s of the 5-6 minutes both take)."""
    import torch

    unknown = [e for e in extensions if e not in EXTENSIONS]
    if unknown or not extensions:
        raise ValueError(f"extensions must be a non-empty subset of {EXTENSIONS}, got {list(extensions)}")
    if not torch.cuda.is_available():
        raise RuntimeError("building mamba-ssm's CUDA extensions needs a GPU visible to torch")
    major, minor = torch.cuda.get_device_capability()
    folder = build_dir(torch.__version__.split("+")[0], torch.version.cuda, f"{major}{minor}")
    manifest = folder / "manifest.json"
    prepare_sources(sdist_dir)  # also needed to import mamba-ssm from the cache when a build is reused
    built = json.loads(manifest.read_text())["extensions"] if manifest.is_file() and not force else {}
    names = [e for e in extensions if e not in built]
    if not names:
        print(f"reusing the build in {folder}")
        return manifest
    os.environ["TORCH_CUDA_ARCH_LIST"] = f"{major}.{minor}"  # this GPU's architecture only
    jobs = jobs or os.cpu_count() or 2
    began = time.time()
    with ProcessPoolExecutor(len(names), mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {n: pool.submit(_compile, n, folder / n, max(1, jobs // len(names))) for n in names}
        built.update({n: f.result() for n, f in futures.items()})
    info = {
        "extensions": built,
        "wall_seconds": round(time.time() - began, 1),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "arch": f"sm_{major}{minor}",
        "gpu": torch.cuda.get_device_name(),
        "nvcc_flags": _NVCC_FLAGS,
        "sdists": SDISTS,
    }
    manifest.write_text(json.dumps(info, indent=2))
    print(json.dumps(info, indent=2))
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m torch_reference.build",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--sdist-dir", type=Path, help="folder holding the two sdists (offline machines)")
    parser.add_argument("--jobs", type=int, help="parallel compile jobs in all (default: all cores)")
    parser.add_argument("--force", action="store_true", help="rebuild even if a build exists")
    parser.add_argument(
        "--extensions", nargs="+", default=list(EXTENSIONS), help=f"which to build (default: {' '.join(EXTENSIONS)})"
    )
    parser.add_argument(
        "--unpack-only",
        action="store_true",
        help="only unpack the sdists into the cache, so that mamba-ssm imports there without its CUDA extensions "
        "(for comparisons of its Triton kernels: compare.kernels --op ssd); no GPU needed",
    )
    parser.add_argument(
        "--import",
        dest="import_dir",
        type=Path,
        help="first unpack a build exported by --export from this folder (then reused where it fits this machine)",
    )
    parser.add_argument(
        "--export", type=Path, help="after the build, write every build in the cache to this folder as xz parts"
    )
    args = parser.parse_args(argv)
    if args.import_dir:
        print(f"imported {len(build_parts.import_parts(args.import_dir))} files from {args.import_dir}")
    if args.unpack_only:
        prepare_sources(args.sdist_dir)
        print(f"unpacked into {source_dir('mamba_ssm').parent}")
        return 0
    build(args.sdist_dir, args.jobs, args.force, tuple(args.extensions))
    if args.export:
        print(f"exported {len(build_parts.export_parts(args.export))} parts to {args.export}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
