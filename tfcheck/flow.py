"""The public path ``tfcheck.flow``: the module lives in ``tfcheck.probe.flow``; its public names are
re-exported here so code and printed lines written against this path keep working."""
from tfcheck.probe.flow import (  # noqa: F401
    ROUNDING,
    Judgement,
    change_per_position,
    replace_tokens,
    tolerance,
)

__all__ = ['change_per_position', 'Judgement', 'replace_tokens', 'ROUNDING', 'tolerance']
