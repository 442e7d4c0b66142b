"""The SSD's Pallas kernels on the Triton backend and their launches (chosen pass by pass by ``ssd.dispatch``)."""
