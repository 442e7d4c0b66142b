"""The decoding step's Mosaic GPU kernel, shared by the selective state update and Mamba-3's steps."""
