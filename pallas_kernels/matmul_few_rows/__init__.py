"""x (M, K) @ w (K, N) for few rows M (decoding): a Pallas kernel that streams w once at memory bandwidth."""
