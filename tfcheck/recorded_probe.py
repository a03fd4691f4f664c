"""The public path ``tfcheck.recorded_probe``: the module lives in ``tfcheck.probe.recorded_probe``; its public
names are re-exported here so code and printed lines written against this path keep working."""
from tfcheck.probe.recorded_probe import (  # noqa: F401
    ObserverFactory,
    RecordedProbe,
    observer,
    shared,
)

__all__ = ['observer', 'ObserverFactory', 'RecordedProbe', 'shared']
