"""compare.characterize.graph_profile's attribution on the CPU: every model part's name scope reaches the compiled
step's HLO (a renamed scope would silently move its time to "other"), Pallas kernels go to the Mamba by name, and the
padding shares are counted from the batches. (The profile itself needs a GPU's kernel trace.)"""

import numpy as np

from compare.characterize.graph_profile import OTHER, PARTS, kernel_part, padding_stats
from compare.characterize.step_profile import compile_step
from jax_mamba.configs import load_config
from jax_mamba.tasks import task_for
from jax_mamba.train.step import init_training


def test_every_part_is_named_in_the_compiled_step():
    cfg = load_config("graph-mamba-tiny", ["--train.batch_size=4"])
    task = task_for(cfg)
    dataset = task.make_dataset()
    setup = init_training(cfg, task)
    batch = dataset.train_batch(0, cfg.train.grad_accum_steps)
    _, scopes = compile_step(setup, batch)
    parts = {kernel_part(kernel, scopes) for kernel in scopes}
    assert {part for part, _ in PARTS} <= parts, sorted(parts)
    assert OTHER in parts  # the optimizer update is in no model scope


def test_pallas_kernels_and_unknown_names():
    assert kernel_part("selective_scan_bwd", {}) == "Mamba (global)"
    assert kernel_part("input_reduce_fusion_7", {"input_reduce_fusion_7": "jit(step)/gps_layer/ffn/dot"}) == "FFN"
    assert kernel_part("memcpy32_post", {}) == OTHER


def test_padding_shares():
    node_mask = np.zeros((1, 10), np.float32)
    node_mask[0, :6] = 1
    edge_mask = np.zeros((1, 20), np.float32)
    edge_mask[0, :5] = 1
    batch = {"node_mask": node_mask, "edge_mask": edge_mask, "slots": np.zeros((1, 3, 4), np.int32)}
    stats = padding_stats([batch, batch])
    assert stats["real_node_share"] == 0.6 and stats["real_edge_share"] == 0.25 and stats["real_slot_share"] == 0.5
    assert stats["shapes"] == [(10, 20, 4)]
