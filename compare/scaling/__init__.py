"""How a training step scales over several devices: throughput per device count, and where a sharded step's time goes.

``python -m compare.scaling`` trains a config on 1, 2, 4, ... devices beside PyTorch (``sweep``); ``join`` makes one
report of several runs, ``mesh_profile`` splits a sharded step's time per device (compute, collectives, idle)."""
