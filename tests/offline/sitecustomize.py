"""Loaded by every Python process of the offline build check (it is first on PYTHONPATH).

Refuses, and logs to $GATE_NET_LOG, any connection or name lookup that is not
for this machine: the Sphinx process, every notebook kernel and every Python
subprocess a page starts.  The network namespace (`unshare -rn`) blocks the
rest; this log also catches attempts a page would have caught and ignored.
"""

import os
import socket

_LOG = os.environ.get("GATE_NET_LOG")
_LOCAL_NAMES = {"localhost", "127.0.0.1", "::1", "0.0.0.0", "", None, socket.gethostname()}


def _local(host) -> bool:
    if isinstance(host, bytes):
        host = host.decode(errors="replace")
    return host in _LOCAL_NAMES or str(host).startswith(("127.", "::ffff:127."))


def _refuse(what: str) -> None:
    if _LOG:
        with open(_LOG, "a", encoding="utf-8") as f:
            f.write(f"{os.getpid()} {what}\n")
    raise OSError(f"offline build: refused {what}")


def _guard(method):
    def guarded(self, address, *args):
        if isinstance(address, tuple) and self.family in (socket.AF_INET, socket.AF_INET6) \
                and not _local(address[0]):
            _refuse(f"{method.__name__} {address!r}")
        return method(self, address, *args)

    guarded.__name__ = method.__name__
    return guarded


_getaddrinfo = socket.getaddrinfo


def _guarded_getaddrinfo(host, *args, **kwargs):
    if not _local(host):
        _refuse(f"getaddrinfo {host!r}")
    return _getaddrinfo(host, *args, **kwargs)


if _LOG:
    socket.socket.connect = _guard(socket.socket.connect)
    socket.socket.connect_ex = _guard(socket.socket.connect_ex)
    socket.getaddrinfo = _guarded_getaddrinfo
