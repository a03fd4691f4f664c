"""The models of docs/pytest-plugin.md's examples, as if they were yours: the reference decoder, one that returns
its hidden states instead of logits, and an encoder whose token embeddings drown the position table (a warning)."""
from reference_model import TransformerLM as GPT  # noqa: F401
from reference_model.broken.numerics import EmbeddingDrownsPositions as LoudEmbeddingEncoder  # noqa: F401
from reference_model.broken.shapes import LMWithoutHead as HeadlessGPT  # noqa: F401
