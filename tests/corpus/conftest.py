"""The corpus runs offline: a corpus package that reached for the Hub or any other host at run time would make
the suite depend on the network, and tfcheck promises never to download. HF_HUB_OFFLINE=1, and a connect to
any address but this machine's own fails at once (AF_UNIX and loopback stay open: pytest-xdist's execnet and
local servers use them)."""
from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

# corpus.py and corpus_models.py are imported by bare name, as the corpus specs name them ("corpus_models:x_decoder")
sys.path.insert(0, str(Path(__file__).parent))

from corpus_offline import NetworkBlocked, is_local  # noqa: E402


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    connect, connect_ex = socket.socket.connect, socket.socket.connect_ex

    def guarded(real):
        def call(self, address):
            if not is_local(self.family, address):
                raise NetworkBlocked(f"the corpus tests run offline: connect to {address!r} refused")
            return real(self, address)
        return call

    monkeypatch.setattr(socket.socket, "connect", guarded(connect))
    monkeypatch.setattr(socket.socket, "connect_ex", guarded(connect_ex))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
