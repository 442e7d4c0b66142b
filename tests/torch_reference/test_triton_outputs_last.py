"""torch_reference.triton_outputs_last on the CPU: mamba-ssm's SSD forward kernels reordered for jax-triton
(inputs, then outputs, then constants), autotuning kept, bad outputs refused, and one kernel run through Triton's
interpreter as itself and reordered, bit for bit."""

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import SESSION_SEED

OUTPUTS = {  # module, kernel -> its outputs, as mamba-ssm's forward launches it
    ("ssd_chunk_state", "_chunk_cumsum_fwd_kernel"): ("dt_out_ptr", "dA_cumsum_ptr"),
    ("ssd_chunk_state", "_chunk_state_fwd_kernel"): ("states_ptr",),
    ("ssd_state_passing", "_state_passing_fwd_kernel"): ("out_ptr", "final_states_ptr"),
    ("ssd_bmm", "_bmm_chunk_fwd_kernel"): ("out_ptr",),
    ("ssd_chunk_scan", "_chunk_scan_fwd_kernel"): ("out_ptr", "out_x_ptr"),
}


def kernel(module: str, name: str):
    import importlib

    return getattr(importlib.import_module(f"mamba_ssm.ops.triton.{module}"), name)


@pytest.mark.parametrize("where", sorted(OUTPUTS), ids=lambda w: w[1])
def test_forward_kernels_take_outputs_after_inputs_and_keep_their_autotuning(cpu_reference, where):
    from torch_reference.triton_outputs_last import outputs_last, parameter_order

    tuned = kernel(*where)
    outputs = OUTPUTS[where]
    runtime, constants = parameter_order(tuned.fn, outputs)
    wrapped = outputs_last(tuned, outputs)
    assert wrapped.fn.arg_names == runtime + constants
    assert runtime[-len(outputs) :] == list(outputs)
    assert sorted(runtime + constants) == sorted(tuned.fn.arg_names)  # every parameter, once
    assert all(name.isupper() or name == "dot_dtype" for name in constants)  # mamba-ssm's constants
    assert wrapped.configs == tuned.configs and list(wrapped.keys) == list(tuned.keys)
    assert outputs_last(tuned, outputs) is wrapped  # generated once per kernel and outputs


def test_chunk_scan_order_spelled_out(cpu_reference):
    from torch_reference.triton_outputs_last import parameter_order

    runtime, constants = parameter_order(
        kernel("ssd_chunk_scan", "_chunk_scan_fwd_kernel").fn, ("out_x_ptr", "out_ptr")
    )
    pointers = [
        "cb_ptr",
        "x_ptr",
        "z_ptr",
        "dt_ptr",
        "dA_cumsum_ptr",
        "seq_idx_ptr",
        "C_ptr",
        "prev_states_ptr",
        "D_ptr",
    ]
    assert runtime[:9] == pointers and runtime[-2:] == ["out_ptr", "out_x_ptr"]  # the kernel's order, not the call's
    assert constants[0] == "IS_CAUSAL" and constants[-1] == "IS_TRITON_22"


def test_bad_outputs_are_refused(cpu_reference):
    from torch_reference.triton_outputs_last import outputs_last

    tuned = kernel("ssd_bmm", "_bmm_chunk_fwd_kernel")
    with pytest.raises(ValueError, match=r"\['o_ptr'\] are not parameters of _bmm_chunk_fwd_kernel"):
        outputs_last(tuned, ("o_ptr",))
    with pytest.raises(ValueError, match="must be pointers"):
        outputs_last(tuned, ("out_ptr", "HAS_SEQ_IDX"))
    with pytest.raises(TypeError, match="JITFunction"):
        outputs_last(len, ("x",))


def test_reordered_kernel_matches_the_kernel_in_the_interpreter(cpu_reference):
    done = subprocess.run(
        [sys.executable, "-m", "tests.torch_reference.interpreted_outputs_last", str(SESSION_SEED)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TRITON_INTERPRET": "1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["chunk_cumsum"] == {
        "dt_out": {"equal": True, "nan": False},
        "dA_cumsum": {"equal": True, "nan": False},
    }


def test_multiples_of_16_become_hints_in_the_wrapper(cpu_reference):
    from torch_reference.triton_outputs_last import outputs_last, wrapper_source

    tuned = kernel("ssd_bmm", "_bmm_chunk_fwd_kernel")
    source = wrapper_source(tuned.fn, ("out_ptr",), frozenset({"stride_a_seqlen", "K"}))
    assert "    K = K // 16 * 16\n    stride_a_seqlen = stride_a_seqlen // 16 * 16\n    _kernel(" in source
    assert "// 16" not in wrapper_source(tuned.fn, ("out_ptr",))
    hinted = outputs_last(tuned, ("out_ptr",), frozenset({"K"}))
    assert hinted is not outputs_last(tuned, ("out_ptr",)) and hinted.configs == tuned.configs
    for bad in ("out_ptr", "HAS_SEQ_IDX", "k"):  # an output, a constant, no such parameter
        with pytest.raises(ValueError, match=rf"multiples_of_16 \['{bad}'\]"):
            wrapper_source(tuned.fn, ("out_ptr",), frozenset({bad}))


def test_pre_hook_zeroing_is_read_and_the_hooks_dropped(cpu_reference):
    """jax-triton refuses config pre-hooks: the wrapper's configs carry none, and the names mamba-ssm's
    ``init_to_zero`` hooks zero are read back for the launcher to zero instead; another kind of hook is refused."""
    import triton

    from torch_reference.triton_outputs_last import outputs_last, zeroed_by_pre_hooks

    tuned = kernel("ssd_chunk_state", "_chunk_cumsum_bwd_kernel")
    assert zeroed_by_pre_hooks(tuned) == {"dA_ptr", "ddt_bias_ptr"}
    assert zeroed_by_pre_hooks(kernel("ssd_chunk_state", "_chunk_cumsum_fwd_kernel")) == set()
    wrapped = outputs_last(tuned, ("ddt_ptr", "dA_ptr", "ddt_bias_ptr"))
    assert all(c.pre_hook is None for c in wrapped.configs)
    assert [(c.kwargs, c.num_warps, c.num_stages) for c in wrapped.configs] == [
        (c.kwargs, c.num_warps, c.num_stages) for c in tuned.configs
    ]
    other = triton.autotune(configs=[triton.Config({}, pre_hook=lambda nargs: None)], key=[])(tuned.fn)
    with pytest.raises(TypeError, match="init_to_zero"):
        zeroed_by_pre_hooks(other)


def test_importing_jax_triton_leaves_triton_its_cache_folder(monkeypatch):
    """jax-triton blanks TRITON_CACHE_DIR on import, after which Triton launched from PyTorch in the same process
    cannot build its driver; the project's import removes the blank setting."""
    import types

    import triton

    from torch_reference.ssd_jax_triton.launch import import_jax_triton

    stand_in = types.SimpleNamespace(triton_call=None)
    monkeypatch.setitem(sys.modules, "jax_triton", stand_in)
    monkeypatch.setenv("TRITON_CACHE_DIR", "")  # what jax_triton's import does
    assert import_jax_triton() is stand_in
    assert "TRITON_CACHE_DIR" not in os.environ
    assert triton.knobs.cache.dir  # Triton's default folder again
    monkeypatch.setenv("TRITON_CACHE_DIR", "/somewhere/chosen")
    import_jax_triton()
    assert os.environ["TRITON_CACHE_DIR"] == "/somewhere/chosen"  # a real choice is kept
