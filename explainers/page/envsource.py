"""Read a package installed beside torch in a supported release's environment.

:mod:`explainers.page.torchsource` reads the torch this process runs; a page
that compares a dependency across releases (Triton, which each torch wheel
pins) reads each environment's copy from disk instead, without importing it.
"""

from __future__ import annotations

from explainers.releases import env_python

__all__ = ["package_file"]


def package_file(release: str, package: str, relpath: str) -> tuple[str, str]:
    """The text of ``package/relpath`` in ``release``'s environment, and that package's version.

    The version is the one its ``.dist-info`` folder names, so two releases
    that pin different versions of the package read different files.

    >>> text, version = package_file("2.15.0", "triton", "knobs.py")
    >>> version.count("."), "TRITON_DEFAULT_FP_FUSION" in text
    (2, True)
    >>> package_file("2.15.0", "no_such_package", "x.py")
    Traceback (most recent call last):
    ...
    FileNotFoundError: no no_such_package-*.dist-info in torch 2.15.0's environment
    """
    site = next(env_python(release).parents[1].glob("lib/python*/site-packages"))
    found = sorted(site.glob(f"{package}-*.dist-info"))
    if not found:
        raise FileNotFoundError(f"no {package}-*.dist-info in torch {release}'s environment")
    version = found[0].name.removeprefix(f"{package}-").removesuffix(".dist-info")
    return (site / package / relpath).read_text(), version
