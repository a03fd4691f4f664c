"""The public path ``tfcheck.shrinking``: the generic search lives in ``tfcheck.tools.shrinking``,
``replay`` in ``tfcheck.tools.replay`` and each check's examples beside the check; their public names
are re-exported here so code and printed replay lines written against this path keep working."""
from tfcheck.battery import all_checks
from tfcheck.checks.flow.batch_independence import BatchExample, BatchProperty  # noqa: F401
from tfcheck.checks.mask.causal_examples import CausalExample, CausalProperty  # noqa: F401
from tfcheck.checks.mask.padding_examples import PaddingExample, PaddingProperty, describe_padding, layout  # noqa: F401
from tfcheck.tools.replay import replay  # noqa: F401
from tfcheck.tools.shrinking import (  # noqa: F401
    MAX_EXAMPLES,
    MAX_FORWARDS,
    MAX_SECONDS,
    Property,
    Search,
    Shown,
    example_dict,
    isolated_hypothesis,
    replay_command,
    search,
    search_settings,
    with_minimal_example,
)

all_checks()  # replay reads each check's property off the battery, which a public path loads

__all__ = ['BatchExample', 'BatchProperty', 'CausalExample', 'CausalProperty', 'describe_padding', 'example_dict',
           'isolated_hypothesis', 'layout', 'MAX_EXAMPLES', 'MAX_FORWARDS', 'MAX_SECONDS', 'PaddingExample',
           'PaddingProperty', 'Property', 'replay', 'replay_command', 'Search', 'search', 'search_settings', 'Shown',
           'with_minimal_example']
