"""The engine: the registry of checks and the runner that calls them under guard, budget and device."""
