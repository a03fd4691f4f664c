"""The corpus tests' network guard (corpus_offline.py, installed by conftest.py): a connect to another host fails
before anything is sent; this machine's own addresses and AF_UNIX stay open."""
from __future__ import annotations

import os
import socket

import pytest
from corpus_offline import NetworkBlocked


def test_a_connect_to_another_host_is_refused():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock, pytest.raises(NetworkBlocked):
        sock.connect(("192.0.2.1", 443))  # TEST-NET-1: never routed
    assert os.environ["HF_HUB_OFFLINE"] == "1"


def test_loopback_and_unix_sockets_stay_open(tmp_path):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        with socket.create_connection(server.getsockname(), timeout=5):
            pass
    path = str(tmp_path / "s")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(path)
        server.listen(1)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.connect(path)
