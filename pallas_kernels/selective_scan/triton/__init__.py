"""The selective scan's Pallas kernels on the Triton backend and their launches (chosen pass by pass by
``selective_scan.dispatch``)."""
