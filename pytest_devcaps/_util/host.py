"""This machine's host name: the one every report (pytest, check, probe, a rank's) records."""

from __future__ import annotations


def host_name() -> str:
    import socket

    return socket.gethostname()
