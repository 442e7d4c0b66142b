"""The selective scan's Pallas kernels on the Mosaic GPU backend (Hopper's TMA), where the config asks for them and
``selective_scan.dispatch`` finds the shape covered."""
