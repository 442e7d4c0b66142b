"""Load mamba-ssm: at its best on a GPU, or as a correct CPU fallback, and say which one is active.

``load()`` returns a :class:`Reference` whose attributes are mamba-ssm's own functions and classes. The choice is
process-wide (mamba-ssm is imported once):

- ``cuda``: the ``selective_scan_cuda`` and ``causal_conv1d_cuda`` extensions built by ``python -m
  torch_reference.build`` (registered before mamba-ssm is imported; a build of selective_scan_cuda alone serves
  MambaVision, and ``fast_paths`` says causal-conv1d is missing), Triton SSD and gated RMSNorm, fused add+norm and
  the fused Mamba-2 path: what mamba-ssm users get. With ``require_extensions=False`` and no build on the machine,
  mamba-ssm runs on the GPU without its CUDA extensions (a stub ``selective_scan_cuda`` that raises): enough for
  comparisons that call only its Triton kernels (the SSD), without the minutes the build takes.
- ``cpu``: ``selective_scan_cuda`` is a stub that raises; mamba-ssm's own reference functions stand in for the CUDA and
  Triton ops (``selective_scan_ref``, ``ssd_chunk_scan_combined_ref``, the torch RMSNorm references); models are built
  unfused (``fused_add_norm=False``, ``use_mem_eff_path=False``) and without causal-conv1d (``nn.Conv1d``).

On both, hybrids' attention layers take their rotary embeddings from flash-attn where it is installed, else from
``torch_reference.rotary`` (``fast_paths["flash_attn_rotary"]`` says which).
"""

import importlib.machinery
import importlib.util
import json
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path

from torch_reference import rotary
from torch_reference.paths import MAMBA_SSM_VERSION, build_dir, source_dir

_LOADED: "Reference | None" = None


@dataclass
class Reference:
    device: str  # "cuda" or "cpu"
    fast_paths: dict[str, bool]
    ns: types.SimpleNamespace = field(repr=False)  # mamba-ssm's functions and classes, see _collect

    def describe(self) -> str:
        on = [k for k, v in self.fast_paths.items() if v]
        off = [k for k, v in self.fast_paths.items() if not v]
        return (
            f"mamba-ssm {MAMBA_SSM_VERSION} on {self.device}: fast paths {on or 'none'}; "
            f"reference fallbacks for {off or 'nothing'}"
        )

    def __getattr__(self, name):
        return getattr(self.ns, name)

    def model_options(self, layer: str) -> dict:
        """What MambaLMHeadModel needs here: fused add+norm and the fused Mamba-2 path only on the GPU."""
        fused = self.device == "cuda"
        mamba2_unfused = not fused and layer == "Mamba2"
        return {"fused_add_norm": fused, "ssm_overrides": {"use_mem_eff_path": False} if mamba2_unfused else {}}


def _load_extension(name: str, path: Path) -> types.ModuleType:
    loader = importlib.machinery.ExtensionFileLoader(name, str(path))
    spec = importlib.util.spec_from_file_location(name, path, loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    sys.modules[name] = module
    return module


def _stub_selective_scan_cuda(why: str) -> None:
    stub = types.ModuleType("selective_scan_cuda")

    def unavailable(*_args, **_kwargs):
        raise RuntimeError(f"selective_scan_cuda is not built: {why}")

    stub.fwd = stub.bwd = unavailable
    sys.modules["selective_scan_cuda"] = stub


def _ensure_importable(package: str) -> None:
    """Put the unpacked sdist on sys.path when the package is not installed (e.g. on the GPU machines)."""
    if importlib.util.find_spec(package) is None and source_dir(package).is_dir():
        sys.path.insert(0, str(source_dir(package)))
    if importlib.util.find_spec(package) is None:
        raise ImportError(
            f"{package} is not importable: install it (make setup-torch) or run "
            "python -m torch_reference.build, which unpacks it into the cache"
        )


def _register_cuda_extensions(required: bool) -> dict[str, bool]:
    """Load the extensions built for this torch/CUDA/GPU; where there is no build, raise if ``required``, else stub
    ``selective_scan_cuda`` (mamba-ssm imports it) and report both missing."""
    import torch

    major, minor = torch.cuda.get_device_capability()
    folder = build_dir(torch.__version__.split("+")[0], torch.version.cuda, f"{major}{minor}")
    manifest = folder / "manifest.json"
    if not manifest.is_file():
        if required:
            raise RuntimeError(
                f"no CUDA build of mamba-ssm's extensions in {folder}; run: python -m torch_reference.build"
            )
        _stub_selective_scan_cuda("loaded with require_extensions=False on a machine without the build")
        return {"selective_scan_cuda": False, "causal_conv1d_cuda": False}
    built = json.loads(manifest.read_text())["extensions"]
    for name, info in built.items():
        _load_extension(name, Path(info["path"]))
    return {name: name in built for name in ("selective_scan_cuda", "causal_conv1d_cuda")}


def _patch_cpu_fallbacks() -> None:
    """Swap mamba-ssm's CUDA/Triton ops for its own torch references where its modules call them."""
    import mamba_ssm.modules.mamba2 as mamba2
    import mamba_ssm.modules.mamba_simple as mamba_simple
    import mamba_ssm.ops.triton.layer_norm as layer_norm
    import mamba_ssm.ops.triton.layernorm_gated as layernorm_gated
    from mamba_ssm.ops.selective_scan_interface import selective_scan_ref
    from mamba_ssm.ops.triton.ssd_combined import ssd_chunk_scan_combined_ref

    mamba_simple.selective_scan_fn = selective_scan_ref

    def chunk_scan_cpu(
        x,
        dt,
        A,
        B,
        C,
        chunk_size,
        D=None,
        z=None,
        dt_bias=None,
        initial_states=None,
        seq_idx=None,
        cu_seqlens=None,
        dt_softplus=False,
        dt_limit=(0.0, float("inf")),
        return_final_states=False,
        **_,
    ):
        unsupported = {
            "initial_states": initial_states is not None,
            "seq_idx": seq_idx is not None,
            "cu_seqlens": cu_seqlens is not None,
            "return_final_states": return_final_states,
            "dt_limit": tuple(dt_limit) != (0.0, float("inf")),
            "L % chunk_size": x.shape[1] % chunk_size,
        }
        if any(unsupported.values()):
            raise NotImplementedError(
                f"CPU fallback (ssd_chunk_scan_combined_ref) does not support "
                f"{[k for k, v in unsupported.items() if v]}"
            )
        return ssd_chunk_scan_combined_ref(
            x, dt, A, B, C, chunk_size, D=D, z=z, dt_bias=dt_bias, dt_softplus=dt_softplus
        )

    mamba2.mamba_chunk_scan_combined = chunk_scan_cpu

    def gated_rmsnorm_cpu(x, weight, bias, z=None, eps=1e-6, group_size=None, norm_before_gate=True):
        return layernorm_gated.rms_norm_ref(
            x, weight, bias, z=z, eps=eps, group_size=group_size, norm_before_gate=norm_before_gate, upcast=True
        )

    layernorm_gated.rmsnorm_fn = gated_rmsnorm_cpu

    def rmsnorm_cpu(x, weight, bias, residual=None, eps=1e-6, prenorm=False, residual_in_fp32=False, **_):
        if residual is not None or prenorm:
            raise NotImplementedError("CPU fallback: fused add+norm is off (build models with fused_add_norm=False)")
        return layer_norm.rms_norm_ref(x, weight, bias, eps=eps, upcast=True)

    layer_norm.rms_norm_fn = rmsnorm_cpu


def _collect(device: str) -> types.SimpleNamespace:
    from mamba_ssm.models.config_mamba import MambaConfig
    from mamba_ssm.models.mixer_seq_simple import MambaLMHeadModel
    from mamba_ssm.modules.mamba_simple import Mamba
    from mamba_ssm.modules.ssd_minimal import ssd_minimal_discrete
    from mamba_ssm.ops.selective_scan_interface import selective_scan_fn, selective_scan_ref
    from mamba_ssm.ops.triton import layernorm_gated
    from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined, ssd_chunk_scan_combined_ref

    ns = types.SimpleNamespace(
        MambaConfig=MambaConfig,
        MambaLMHeadModel=MambaLMHeadModel,
        Mamba=Mamba,  # the Mamba-1 mixer alone (Graph-Mamba's global model); its module-level ops are patched above
        selective_scan_ref=selective_scan_ref,
        ssd_minimal_discrete=ssd_minimal_discrete,
        ssd_chunk_scan_combined_ref=ssd_chunk_scan_combined_ref,
        rms_norm_gated_ref=layernorm_gated.rms_norm_ref,
        causal_conv1d_fn=None,
    )
    if device == "cuda":
        ns.selective_scan_fn, ns.mamba_chunk_scan_combined = selective_scan_fn, mamba_chunk_scan_combined
        ns.rmsnorm_fn = layernorm_gated.rmsnorm_fn
        if "causal_conv1d_cuda" in sys.modules:
            from causal_conv1d import causal_conv1d_fn

            ns.causal_conv1d_fn = causal_conv1d_fn
    else:
        ns.selective_scan_fn, ns.mamba_chunk_scan_combined = selective_scan_ref, None
        ns.rmsnorm_fn = layernorm_gated.rms_norm_ref
    return ns


def load(device: str = "auto", *, require_extensions: bool = True) -> Reference:
    """mamba-ssm for ``device`` ("cuda", "cpu" or "auto": cuda when torch sees a GPU). Once per process.
    ``require_extensions=False``: on cuda, go on without the CUDA extensions where none are built (for callers of
    mamba-ssm's Triton kernels only; ``fast_paths`` says what is missing)."""
    global _LOADED
    import torch

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device not in ("cuda", "cpu"):
        raise ValueError(f"device must be 'cuda', 'cpu' or 'auto', got {device!r}")
    if _LOADED is not None:
        if _LOADED.device != device:
            raise RuntimeError(
                f"mamba-ssm is already loaded for {_LOADED.device} in this process; it cannot switch to {device}"
            )
        if device == "cuda" and require_extensions and not _LOADED.fast_paths["selective_scan_cuda"]:
            raise RuntimeError("mamba-ssm is already loaded without its CUDA extensions in this process")
        return _LOADED
    _ensure_importable("mamba_ssm")
    if device == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError("device='cuda' but torch sees no GPU")
        built = _register_cuda_extensions(require_extensions)
        if built["causal_conv1d_cuda"]:  # optional: without it mamba-ssm's modules take their nn.Conv1d path
            _ensure_importable("causal_conv1d")
        fast = {**built, "triton_ssd": True, "fused_add_norm": True}
    else:
        _stub_selective_scan_cuda("this is torch_reference's CPU fallback")
        fast = {"selective_scan_cuda": False, "causal_conv1d_cuda": False, "triton_ssd": False, "fused_add_norm": False}
    import mamba_ssm

    if mamba_ssm.__version__ != MAMBA_SSM_VERSION:
        raise ImportError(
            f"expected mamba-ssm {MAMBA_SSM_VERSION}, found {mamba_ssm.__version__} at {mamba_ssm.__file__}"
        )
    if device == "cpu":
        _patch_cpu_fallbacks()
    fast["flash_attn_rotary"] = rotary.install_if_missing()  # else torch_reference.rotary's, for hybrids' MHA
    _LOADED = Reference(device, fast, _collect(device))
    return _LOADED
