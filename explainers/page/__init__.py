"""What every page imports besides its topic: the stamp, tables, quotes of torch, errors shown.

- :mod:`~explainers.page.stamp`: the "verified on" stamp a page's execution produces.
- :mod:`~explainers.page.tables`: ``md_table``, a Markdown table of the rows a cell computed.
- :mod:`~explainers.page.torchsource`: excerpts of the installed torch's own source.
- :mod:`~explainers.page.envsource`: a file of a package beside torch in a release's environment.
- :mod:`~explainers.page.errors`: a call's traceback with build-independent paths, or its error.
- :mod:`~explainers.page.pasted`: run a snippet as a reader who pasted it would, alone in an empty folder.
"""
