"""One recurrent step of the selective SSM (decoding): ``selective_state_update`` with mamba-ssm's semantics."""
