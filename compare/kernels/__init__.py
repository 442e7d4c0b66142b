"""How fast is each kernel, ours beside mamba-ssm's, and where a kernel's time goes.

``python -m compare.kernels`` runs the kernel benchmark (``bench``); ``ops`` holds the ops it times (shapes,
inputs, cost model), ``launches`` reads per-kernel GPU time from profiler traces, and the other modules answer
one kernel question each (``ssd_forward_variants``, ``reference_chunk_sweep``, ``triton_ir``)."""
