"""The SSD's Pallas kernels on the Mosaic GPU backend (Hopper's TMA and ``wgmma``) and their launches (chosen pass by
pass by ``ssd.dispatch`` where they cover the shape)."""
