"""The causal conv1d's Pallas kernels on the Mosaic GPU backend (Hopper's TMA), where the config asks for them and
``causal_conv1d.dispatch`` finds the shape covered."""
