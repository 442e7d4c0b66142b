"""How the few-rows matmul splits K over programs for a shape and a GPU (``k_splits``), from its config's
``programs_per_sm``."""

from pallas_kernels.matmul_few_rows.config import MatmulFewRowsConfig


def k_splits(n: int, k: int, config: MatmulFewRowsConfig, sm_count: int) -> tuple[int, int]:
    """(splits of K, block_k steps per split): at least ``programs_per_sm`` x ``sm_count`` programs where K has the
    blocks for them (so that every SM keeps loads in flight), the last split not empty."""
    column_blocks = -(-n // config.block_n)
    k_blocks = -(-k // config.block_k)
    wanted = max(1, -(-config.programs_per_sm * sm_count // column_blocks))
    steps = max(1, k_blocks // wanted)
    return -(-k_blocks // steps), steps
