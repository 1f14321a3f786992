"""Site machinery outside the ``explainers`` package: never shipped, never a page's input.

- ``sitebuild``: the staged, strict Sphinx build that ``nox -s docs`` runs.
"""
