"""How fast does a whole step run: training and inference throughput, decoding speed, where a step's wall time goes.

``python -m compare.throughput`` runs whole training (or ``--inference``) steps of JAX beside PyTorch (``steps``);
``inference`` is its JAX inference side, ``decode`` times generation, ``step_timing`` splits one step's wall time,
``plain_step`` is the training step both sides time."""
