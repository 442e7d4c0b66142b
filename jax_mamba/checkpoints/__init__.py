"""What a run leaves on disk and what it loads: run folders (``run_dir``), the checkpoint store (``store``), and
weight conversion between our variables and the reference implementations' layouts (``convert_table`` and one
table per family: ``convert`` for mamba-ssm's language models, ``convert_mamba_vision``, ``convert_graph_mamba``).
Both ``train`` and ``generate`` use it; it uses neither. Reading or writing a torch pickle imports torch where it
is needed (safetensors and the tables need none)."""
