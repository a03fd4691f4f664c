import sys
from pathlib import Path

# pytester's in-process runs forget the modules first imported inside them, and torch cannot be imported
# twice in one process: import it (and the battery, which registers its checks once) before any run.
import torch  # noqa: F401
import torch._dynamo  # noqa: F401 - imported lazily by meta-device ops; registers torch libraries once

import tfcheck.checks  # noqa: F401
import tfcheck.engine.runner  # noqa: F401

pytest_plugins = ["pytester"]

# The zoo of edge-case models lives beside the tests and is imported by spec ("zoo:TupleOutput").
sys.path.insert(0, str(Path(__file__).parent))
