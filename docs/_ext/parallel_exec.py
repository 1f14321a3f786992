"""Make MyST-NB's page execution safe under ``sphinx-build -j N``.

With ``-j``, Sphinx reads (and so MyST-NB executes) pages in forked worker
processes.  Two races then break cold builds at random:

1. **The execution cache's database.**  jupyter-cache 1.0.1 creates its SQLite
   file lazily, in whichever process first needs it; two workers on a clean
   cache both run ``CREATE TABLE`` and one fails with "table nbproject already
   exists".  Here the main process creates it at ``builder-inited``, before any
   worker forks.
2. **Kernel ports.**  jupyter_client 8.10's local provisioner picks a kernel's
   five TCP ports by binding port 0 and closing the socket; the kernel binds
   them later, so two workers can hand the same port to two kernels (JAX's docs
   hit this: jax-ml/jax#36130, fixed there with a port-picking provisioner).
   Here no kernel uses TCP: :class:`IpcProvisioner`, a kernel provisioner
   (jupyter_client's public hook for launching kernels), starts each kernel on
   the IPC transport, its five Unix sockets in a folder of its own made by
   ``tempfile.mkdtemp``, so no two kernels can share an endpoint.  It is the
   default provisioner of the build's processes: MyST-NB starts kernels through
   nbclient, which takes no kernel-manager settings, and the page's kernelspec
   (ipykernel's ``python3``) names no provisioner.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from importlib.metadata import EntryPoint
from typing import Any

from jupyter_client.provisioning import KernelProvisionerFactory, LocalProvisioner

#: The name the provisioner is registered under.
NAME = "torch-explainers-ipc"


class IpcProvisioner(LocalProvisioner):
    """A local kernel that talks over Unix sockets in a private folder, never over TCP ports."""

    folder: str | None = None

    async def pre_launch(self, **kwargs: Any) -> dict[str, Any]:
        """Point the kernel manager at IPC endpoints in a fresh folder, then launch as usual."""
        km = self.parent
        if self.folder is None:  # a restart keeps the kernel's folder
            self.folder = tempfile.mkdtemp(prefix="kernel-")
        km.transport = "ipc"
        km.cache_ports = False  # nothing to reserve: the endpoints are files
        km.ip = os.path.join(self.folder, "ipc")  # endpoints ipc://<folder>/ipc-1 ... -5
        return await super().pre_launch(**kwargs)

    async def cleanup(self, restart: bool = False) -> None:
        """Remove the kernel's folder once the kernel is gone for good."""
        await super().cleanup(restart=restart)
        if not restart and self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None


def use_ipc_kernels() -> None:
    """Make :class:`IpcProvisioner` the provisioner of every kernel this process (and its
    forked workers) starts.

    The factory finds provisioners by entry point; this one is registered in the
    factory's table of them, as an installed package's entry point would be,
    because the site's extensions are not an installed package.
    ``tests/test_parallel_exec.py`` checks what it does: the kernels of a ``-j 2``
    build run at once, each on its own IPC endpoints.
    """
    factory = KernelProvisionerFactory.instance()
    factory.provisioners[NAME] = EntryPoint(NAME, f"{__name__}:IpcProvisioner",
                                            KernelProvisionerFactory.GROUP_NAME)
    factory.default_provisioner_name = NAME


def _create_cache_db(app) -> None:
    if app.config.nb_execution_mode != "cache":
        return
    from jupyter_cache import get_cache

    get_cache(app.config.nb_execution_cache_path).db  # noqa: B018 - creates the SQLite file


def setup(app):
    use_ipc_kernels()
    app.connect("builder-inited", _create_cache_db)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
