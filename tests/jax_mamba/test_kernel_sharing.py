"""A model's layers share each compiled Pallas kernel, checked by lowering a training gradient for a GPU (an H100)
on the CPU. XLA compiles a Pallas Triton call once per distinct kernel text (its kernel cache is keyed on the custom
call's backend config) and a Mosaic GPU kernel once per kernel hash, so a kernel whose text changed from layer to
layer would be compiled once a layer. The SSD's, the causal conv's and the selective scan's passes run under
``jax.jit`` so that every layer's call shares one compiled kernel (``docs/kernels.md#compiled-once-per-shape``)."""

import collections
import re

import jax
import jax.numpy as jnp
import pytest
from flax import nnx
from jax._src.pallas.triton import gpu_info

from jax_mamba.configs.loader import load_config
from jax_mamba.models import MambaLMHeadModel
from pallas_kernels.causal_conv1d import api as conv_api
from pallas_kernels.rmsnorm_gated import api as norm_api
from pallas_kernels.selective_scan import api as scan_api
from pallas_kernels.ssd import api as ssd_api

_TRITON_CALL = re.compile(r'custom_call @__gpu\$xla\.gpu\.triton\(.*?\bir = "((?:[^"\\]|\\.)*)".*?\bname = "(\w+)"')


def lowered_kernels(config: str, n_layer: int, extra: list) -> tuple[collections.Counter, dict[str, set], list]:
    """(Triton calls in the lowered text by kernel name, each name's distinct kernel texts, Mosaic GPU kernel
    hashes) of a tiny LM's loss gradient with ``n_layer`` layers, bf16, the Pallas kernels compiled (not
    interpreted); Mamba-2's heads 64 wide with a state of 64, as its Mosaic GPU kernels need."""
    overrides = [f"--model.n_layer={n_layer}", "--model.impl=pallas", "--model.compute_dtype=bfloat16", *extra]
    if config.startswith("mamba2"):
        overrides += ["--model.ssm_cfg.headdim=64", "--model.ssm_cfg.d_state=64", "--model.ssm_cfg.chunk_size=64"]
    cfg = load_config(config, overrides)
    graph, params = nnx.split(MambaLMHeadModel(cfg.model, rngs=nnx.Rngs(0)))

    def loss(params, tokens):
        return nnx.merge(graph, params)(tokens).astype(jnp.float32).mean()

    tokens = jax.ShapeDtypeStruct((2, 128), jnp.int32)
    text = jax.jit(jax.grad(loss)).trace(params, tokens).lower(lowering_platforms=("cuda",)).as_text()
    calls, texts = collections.Counter(), collections.defaultdict(set)
    for ir, name in _TRITON_CALL.findall(text):
        calls[name] += 1
        texts[name].add(ir)
    return calls, texts, re.findall(r'kernel_hash = "(.*?)"', text)


@pytest.mark.parametrize(
    "config,extra,kernels,hashes",
    [
        # the scan's passes run under jax.jit: one call of each in the text however many layers call it
        ("mamba1-tiny", [], {"selective_scan_fwd_chunked": 1}, 2),  # the conv's Mosaic GPU forward and backward
        ("mamba1-tiny", ["--model.scan_backend=mosaic_gpu"], {}, 5),  # and the scan's forward, rebuild, backward
        ("mamba2-tiny", [], {"rmsnorm_gated_fwd": 3, "rmsnorm_gated_bwd": 3}, None),  # a call a layer, one text
    ],
    ids=["mamba1", "mamba1-mosaic-scan", "mamba2"],
)
def test_layers_share_each_compiled_kernel(monkeypatch, config, extra, kernels, hashes):
    """Three layers lower as many distinct kernels as one: Triton kernel texts per name, Mosaic GPU kernel hashes
    (``hashes`` of them where given); ``kernels``: how many times three layers' text calls each named Triton kernel
    for one layer's one call."""
    for api in (conv_api, norm_api, scan_api, ssd_api):
        monkeypatch.setattr(api, "interpret_mode", lambda: False)
    monkeypatch.setattr(ssd_api, "gpu_has_wgmma", lambda: True)  # the SSD's default tiling for an H100
    h100 = gpu_info._get_gpu_info_impl(gpu_info.GpuVersion.H100)
    monkeypatch.setattr(gpu_info, "get_gpu_info", lambda: h100)
    calls_one, texts_one, hashes_one = lowered_kernels(config, 1, extra)
    calls_three, texts_three, hashes_three = lowered_kernels(config, 3, extra)
    assert set(kernels) <= set(calls_one)
    for name, times in kernels.items():
        assert calls_three[name] == times * calls_one[name], name
    assert {name: len(t) for name, t in texts_three.items()} == {name: len(t) for name, t in texts_one.items()}
    assert hashes_one  # the causal conv (and Mamba-2's SSD) has Mosaic GPU kernels on an H100
    assert len(set(hashes_three)) == len(set(hashes_one))  # the hashes carry the call site: not equal across models
    assert hashes is None or len(set(hashes_one)) == hashes
