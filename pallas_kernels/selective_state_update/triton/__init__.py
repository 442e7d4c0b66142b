"""The selective state update's Pallas Triton kernel."""
