"""The corpus tests' network guard: which addresses a connect may reach (this machine's own), and the error
for the others. conftest.py installs it around every corpus test."""
from __future__ import annotations

import ipaddress
import socket

LOCAL_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost"}


def is_local(family: int, address) -> bool:
    if family == socket.AF_UNIX:
        return True
    host = address[0] if isinstance(address, tuple) else address
    if isinstance(host, bytes):
        host = host.decode()
    if host in LOCAL_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:  # a host name other than localhost: resolving it is already the network
        return False


class NetworkBlocked(OSError):
    pass
