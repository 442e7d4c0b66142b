"""The Mamba paper's induction-heads task: tiny Mamba-1 and Mamba-2 models must solve it on CPU (accuracy > 0.9 on
held-out sequences) with the bundled configs, in a minute or two each on a 2-core CPU."""

import pytest

from jax_mamba.configs import load_config
from jax_mamba.train.loop import train


@pytest.mark.slow
@pytest.mark.parametrize("name", ["induction-heads-mamba1", "induction-heads-mamba2"])
def test_tiny_models_solve_induction_heads(tmp_path, name):
    """Only the final evaluation, and no checkpoint: the test reads the end's accuracy alone."""
    quiet = ["--progress=false", "--eval_every=100000", "--save_checkpoints=false"]
    result = train(load_config(name, quiet), run_dir=tmp_path, echo=lambda *_: None)
    assert result.eval["eval_accuracy"] > 0.9, result.eval
