"""The battery. Importing this package registers every check, in battery order."""
from tfcheck.checks import forward_smoke, shape_contract  # noqa: F401
