"""``tools/dx_occupancy_probe.py`` times the backward's own ``ssd_bwd_dx`` kernel: its full forms give the backward's
dx and dz (``mosaic_dx``), and its forms without copies really leave them out (Pallas's GPU interpreter, one small
shape with two heads and two blocks)."""

import numpy as np

from pallas_kernels.ssd.mosaic_gpu.backward_dx import mosaic_dx
from tools.dx_occupancy_probe import dx_call, probe_inputs, variants


def test_probe_runs_the_backwards_kernel(rng):
    dims, a = probe_inputs((1, 128, 2, 64, 64, 1, 64), interpret=True, seed=int(rng.integers(2**31)))
    decays = (a["dt_p"], a["cs"], a["to_end"])
    tensors = [a[k] for k in ("B", "C", "D", "z", "dt_bias", "states", "dstates", "dout")]
    dx, *_, dz = mosaic_dx(a["x"], a["dt"], a["A"], decays, *tensors, dims)
    as_f32 = lambda v: np.asarray(v, np.float32)  # noqa: E731
    assert np.isfinite(as_f32(dx)).all() and np.isfinite(as_f32(dz)).all()
    forms = variants(dims)
    run = lambda name: dx_call(forms[name][0], a, *forms[name][1:])[0]()  # noqa: E731
    for name in ("base", "pad"):
        out = run(name)
        np.testing.assert_array_equal(as_f32(out[0]), as_f32(dx), err_msg=name)
        np.testing.assert_array_equal(as_f32(out[-1]), as_f32(dz), err_msg=name)
    assert not np.array_equal(as_f32(run("noS")[0]), as_f32(dx))  # dx reads dS through B dSᵀ
