"""Overrides of graph-mamba-tiny shared by the Graph-Mamba tests of several packages."""

# OGB-style summed embeddings for nodes and edges, no LapPE, a linear multilabel head over mean-pooled graphs
CATEGORICAL_MULTILABEL = [
    "--model.node_feature_kind=categorical",
    "--model.node_vocab=[5,3,7]",
    "--model.edge_feature_kind=categorical",
    "--model.edge_vocab=[4,2]",
    "--model.lap_pe_dim=0",
    "--model.task_level=graph",
    "--model.task_type=multilabel",
    "--model.num_outputs=3",
    "--model.head_layers=1",
]
