"""Pallas Triton kernels compiled for an H100 on a machine without a GPU: their Triton IR, PTX and resources.

``triton_modules`` lowers a function for CUDA as if on an H100 (Pallas's Triton lowering asks only for the GPU's
compute capability, given here) and returns the Triton IR of every ``pallas_call`` in it; ``compile_sm90``
compiles one with the pip ``triton`` package's compiler and its ptxas: registers, spills, shared memory and counts
of a few PTX instructions (SFU, shuffles, barriers, local memory). What a tiling compiles to, without GPU time;
``tools/pallas_sass_report.py`` prints it for the selective scan.
"""

import re
import subprocess
import tempfile
from pathlib import Path

import jax
from jax._src.pallas.triton import gpu_info, pallas_call_registration

COUNTED = {
    "ex2": r"\bex2\.",
    "lg2": r"\blg2\.",
    "rcp": r"\brcp\.",
    "shfl": r"\bshfl\.",
    "bar.sync": r"\bbar\.sync\b|\bbarrier\.sync\b",
    "ld.local": r"\bld\.local",
    "st.local": r"\bst\.local",
    "ld.global": r"\bld\.global",
    "st.global": r"\bst\.global",
    "red/atom": r"\b(red|atom)\.global",
}


def triton_modules(fn, *args) -> list[tuple[str, str]]:
    """(kernel name, Triton IR text) of every pallas_call in ``fn(*args)`` lowered for an H100."""
    captured = []
    original_lower = pallas_call_registration.lowering.lower_jaxpr_to_triton_module

    def recording_lower(jaxpr, grid_mapping, *rest, **kw):
        result = original_lower(jaxpr, grid_mapping, *rest, **kw)
        captured.append(result.module.operation.get_asm(enable_debug_info=False))
        return result

    h100 = gpu_info._get_gpu_info_impl(gpu_info.GpuVersion.H100)
    saved = gpu_info.get_gpu_info, pallas_call_registration.lowering.lower_jaxpr_to_triton_module
    gpu_info.get_gpu_info = lambda: h100
    pallas_call_registration.lowering.lower_jaxpr_to_triton_module = recording_lower
    try:
        text = jax.jit(fn).trace(*args).lower(lowering_platforms=("cuda",)).as_text()
    finally:
        gpu_info.get_gpu_info, pallas_call_registration.lowering.lower_jaxpr_to_triton_module = saved
    names = re.findall(r'name\s*=\s*"([A-Za-z0-9_]+)"', text)
    return [(names[i] if i < len(names) else f"kernel{i}", ir) for i, ir in enumerate(captured)]


def ptxas_resources(ptx: str) -> dict:
    """Registers and spill bytes from the ptxas that ships with the triton package (``-v``)."""
    import triton

    ptxas = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "kernel.ptx"
        src.write_text(ptx)
        done = subprocess.run(
            [str(ptxas), "-arch=sm_90a", "-v", str(src), "-o", str(Path(tmp) / "k.cubin")],
            capture_output=True,
            text=True,
            check=True,
        )
    info = done.stderr + done.stdout
    found = lambda pattern: int(m.group(1)) if (m := re.search(pattern, info)) else None  # noqa: E731
    return {
        "regs": found(r"Used (\d+) registers"),
        "spill_stores": found(r"(\d+) bytes spill stores"),
        "spill_loads": found(r"(\d+) bytes spill loads"),
        "stack": found(r"(\d+) bytes stack frame"),
    }


def compile_sm90(ir_text: str, num_warps: int, dump: str | None = None, num_stages: int | None = None) -> dict:
    """Compile Triton IR for sm_90 (``num_stages``: Triton's pipelining depth, its default if None); resources and
    PTX instruction counts (``dump``: also write its TTGIR/PTX)."""
    import triton
    from triton.backends.compiler import GPUTarget

    options = {"num_warps": num_warps} | ({} if num_stages is None else {"num_stages": num_stages})
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kernel.ttir"
        path.write_text(ir_text)
        compiled = triton.compile(str(path), target=GPUTarget("cuda", 90, 32), options=options)
    ptx = compiled.asm["ptx"]
    if dump:
        Path(dump).write_text(compiled.asm["ttgir"])
        Path(dump).with_suffix(".ptx").write_text(ptx)
    report = {"smem": compiled.metadata.shared, **ptxas_resources(ptx), "instructions": ptx_instructions(ptx)}
    report.update({k: len(re.findall(p, ptx)) for k, p in COUNTED.items()})
    return report


def ptx_instructions(ptx: str) -> int:
    """Static count of PTX instructions (not directives, labels, braces or comments): the whole kernel, so divided
    by the state elements a thread holds per loop iteration it approximates instructions per element."""
    count = 0
    for line in ptx.splitlines():
        line = line.strip()
        if line and not line.startswith(("//", ".", "{", "}", "$", ")")) and not line.endswith(":"):
            count += 1
    return count
