import sys
from pathlib import Path

pytest_plugins = ["pytester"]

# The zoo of edge-case models lives beside the tests and is imported by spec ("zoo:TupleOutput").
sys.path.insert(0, str(Path(__file__).parent))
