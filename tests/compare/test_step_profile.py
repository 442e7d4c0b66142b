"""compare.step_profile's batch choice: the batches of the most common shapes (all keys), so one compiled step runs
them all."""

import numpy as np

from compare.step_profile import common_shape_batches


def test_common_shape_batches_take_the_majority_shape_of_every_key():
    def batch(nodes, edges, tag):
        return {"node_mask": np.full((1, nodes), tag, np.float32), "edge_mask": np.zeros((1, edges), np.float32)}

    batches = [batch(8, 16, 0), batch(8, 32, 1), batch(8, 32, 2), batch(16, 32, 3), batch(8, 32, 4), batch(8, 32, 5)]
    chosen = common_shape_batches(batches, steps=3)
    assert [float(b["node_mask"][0, 0]) for b in chosen] == [1.0, 2.0, 4.0]  # same nodes as batch 0, other edges
    assert all(b["edge_mask"].shape == (1, 32) for b in chosen)
