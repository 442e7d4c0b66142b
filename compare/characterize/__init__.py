"""Where a step's GPU time goes, by operator class and pass, from the profilers and Nsight Compute counters.

``python -m compare.characterize`` writes a config's characterization report (``report``) from the step profile
(``step_profile``), the kernel classes (``kernel_classes``) and, with ``--ncu``, counters (``counters``, ``ncu``,
``ncu_target``), drawn by ``plots``; ``summary`` joins the reports, ``graph_profile`` and ``decode_profile`` split
a Graph-Mamba step and a decoding step."""
