"""Make MyST-NB's page execution safe under ``sphinx-build -j N``.

With ``-j``, Sphinx reads (and so MyST-NB executes) pages in forked worker
processes.  Two races then break cold builds at random:

1. **The execution cache's database.**  jupyter-cache 1.0.1 creates its SQLite
   file lazily, in whichever process first needs it; two workers on a clean
   cache both run ``CREATE TABLE`` and one fails with "table nbproject already
   exists".  Here the main process creates it at ``builder-inited``, before any
   worker forks.
2. **Kernel ports.**  jupyter_client 8.10 picks a kernel's five ports by
   binding port 0 and closing the socket; the kernel binds them later.  Its
   ``LocalPortCache`` keeps one *process* from reusing a port it handed out,
   but two workers can hand the same port to two kernels (the JAX docs hit
   this: jax-ml/jax#36130, fixed there with a portpicker provisioner and a
   port server).  Here every process claims its own block of ports below the
   kernel's ephemeral range (32768-60999 on Linux), which ``bind(0)`` never
   returns, by holding the block's first port bound for its lifetime; kernel
   ports come only from the process's own block.
"""

from __future__ import annotations

import os
import socket

#: Blocks of ports below Linux's default ephemeral range; 200 ports hold a worker's
#: kernels even while closed ones sit in TIME_WAIT for a minute.
FIRST_PORT, LAST_PORT, BLOCK = 20000, 32000, 200

_claim: dict[int, tuple[socket.socket, int]] = {}  # pid -> (held socket, block start)


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\0" * 8)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def claim_block() -> int | None:
    """This process's block start, claimed once by keeping its first port bound (None if all taken)."""
    pid = os.getpid()
    if pid in _claim:  # a forked worker inherits the parent's dict, not its pid
        return _claim[pid][1]
    for start in range(FIRST_PORT, LAST_PORT, BLOCK):
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", start))
        except OSError:
            s.close()
            continue
        _claim[pid] = (s, start)
        return start
    return None


def _install_port_blocks() -> None:
    from jupyter_client.connect import LocalPortCache

    fallback = LocalPortCache.find_available_port
    if getattr(fallback, "_port_blocks", False):
        return  # installed by an earlier build in this process

    def find_available_port(self, ip: str) -> int:
        start = claim_block() if ip in ("127.0.0.1", "localhost") else None
        if start is not None:
            for port in range(start + 1, start + BLOCK):
                if port not in self.currently_used_ports and _bindable(port):
                    self.currently_used_ports.add(port)
                    return port
        return fallback(self, ip)  # block exhausted or not a loopback kernel

    find_available_port._port_blocks = True
    LocalPortCache.find_available_port = find_available_port


def _create_cache_db(app) -> None:
    if app.config.nb_execution_mode != "cache":
        return
    from jupyter_cache import get_cache

    get_cache(app.config.nb_execution_cache_path).db  # noqa: B018 - creates the SQLite file


def setup(app):
    _install_port_blocks()
    app.connect("builder-inited", _create_cache_db)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
