import sys
from pathlib import Path

# pytester's in-process runs forget the modules first imported inside them, and torch cannot be imported
# twice in one process: import it (and the battery, which registers its checks once) before any run.
import torch  # noqa: F401
import torch._dynamo  # noqa: F401 - imported lazily by meta-device ops; registers torch libraries once

import tfcheck.checks  # noqa: F401
import tfcheck.engine.runner  # noqa: F401

pytest_plugins = ["pytester"]

# What the tests share lives in tests/support/ (the zoo of edge-case models, the helpers, the families, the
# snapshot harness) and is imported by its bare module name, as the spec strings name it ("zoo:TupleOutput").
sys.path.insert(0, str(Path(__file__).parent / "support"))
