import signal
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

# A suite started as a background job of a non-interactive shell (a CI script run with `&`) inherits SIGINT
# ignored, and Python then installs no handler: Ctrl-C can neither reach the tests of tfcheck's Ctrl-C handling
# nor the processes they start (an ignored signal stays ignored across exec). A terminal's Ctrl-C is what those
# tests mean, so the suite takes SIGINT back when it finds it ignored; its children then start with the default.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
