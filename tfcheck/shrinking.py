"""The public path ``tfcheck.shrinking``: the module lives in ``tfcheck.explainers.shrinking``; its public names are
re-exported here so code and printed lines written against this path keep working."""
from tfcheck.explainers.shrinking import (  # noqa: F401
    BatchExample,
    BatchProperty,
    CausalExample,
    CausalProperty,
    describe_padding,
    example_dict,
    isolated_hypothesis,
    layout,
    MAX_EXAMPLES,
    MAX_FORWARDS,
    MAX_SECONDS,
    PaddingExample,
    PaddingProperty,
    PROPERTIES,
    Property,
    replay,
    replay_command,
    Search,
    search,
    search_settings,
    Shown,
    with_minimal_example,
)

__all__ = ['BatchExample', 'BatchProperty', 'CausalExample', 'CausalProperty', 'describe_padding', 'example_dict', 'isolated_hypothesis', 'layout', 'MAX_EXAMPLES', 'MAX_FORWARDS', 'MAX_SECONDS', 'PaddingExample', 'PaddingProperty', 'PROPERTIES', 'Property', 'replay', 'replay_command', 'Search', 'search', 'search_settings', 'Shown', 'with_minimal_example']
