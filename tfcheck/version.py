"""tfcheck's version, in a module of its own so that the report can state it without importing the package."""
__version__ = "0.1.0"
