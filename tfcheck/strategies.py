"""The public path ``tfcheck.strategies``: the module lives in ``tfcheck.model.strategies``; its public names are
re-exported here so code and printed lines written against this path keep working."""
from tfcheck.model.strategies import (  # noqa: F401
    batch_sizes,
    lengths,
    MAX_SEED,
    model_inputs,
    ModelInputs,
    padded_batches,
    PaddedBatch,
    padding_masks,
    padding_patterns,
    seeds,
    SIDES,
    token_ids,
)

__all__ = ['batch_sizes', 'lengths', 'MAX_SEED', 'model_inputs', 'ModelInputs', 'padded_batches', 'PaddedBatch', 'padding_masks', 'padding_patterns', 'seeds', 'SIDES', 'token_ids']
