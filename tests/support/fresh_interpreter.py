"""What a script found in a fresh Python interpreter: the tests of which modules a run imports read it there, since
the test process has long imported everything."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def found_by(script: str) -> dict:
    """The JSON object the script printed last, run with ``python -c`` from the repository root."""
    run = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])
