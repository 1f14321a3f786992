"""Read drawings and ``print(tensor)`` back into cells, and label where reading order and cuts fall.

The render page and the tests check :func:`explainers.render.render` with these:

- :func:`printed_cells`: the element strings of ``str(tensor)``, torch's own printer;
- :func:`picture_grid`: the cells of a drawing, row by row, separators removed;
- :func:`morton_index`: which element an all-size-2 drawing puts at a row and column;
- :func:`split_pieces`: which piece of ``torch.split(x, 1, dim)`` each element falls in.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["morton_index", "picture_grid", "printed_cells", "split_pieces"]


def printed_cells(tensor: Any) -> list[str]:
    """The element strings of ``str(tensor)``, in torch's (row-major) order.

    Brackets, commas and the ``tensor(...)`` wrapper are dropped; a summary's
    ``...`` stays.  This reads torch's public ``str``, so a comparison with it
    is a comparison with torch's printer.

    >>> import torch
    >>> printed_cells(torch.tensor([[-2.0, 0.5], [1e-3, 123456.7]]))
    ['-2.0000e+00', '5.0000e-01', '1.0000e-03', '1.2346e+05']
    >>> printed_cells(torch.tensor(1.5))
    ['1.5000']
    """
    text = str(tensor)
    if not text.startswith("tensor("):
        raise ValueError(f"printed_cells: expected a torch.Tensor, got {type(tensor).__name__}")
    body = text[len("tensor(") :]
    if body.startswith("["):
        depth = list(np.cumsum([{"[": 1, "]": -1}.get(ch, 0) for ch in body]))
        data = body[: depth.index(0) + 1]  # up to the bracket that closes the first one
    else:  # 0-D: the value runs to the first ", " (a suffix such as dtype=) or the closing ")"
        data = re.split(r",|\)$", body, maxsplit=1)[0]
    return re.findall(r"[^\s,\[\]]+", data)


def picture_grid(text: str) -> list[list[str]]:
    """The cells of a drawing, row by row, with every separator removed.

    Blank lines, ``:`` columns and dash lines are layout, not data, so
    reading a picture back gives the 2-D grid a reader's eye sees.

    >>> from explainers.render import arange_nd, render
    >>> picture_grid(render(arange_nd(2, 2, 2)))
    [['0', '1', '4', '5'], ['2', '3', '6', '7']]
    """
    rows = []
    for line in text.splitlines():
        cells = [c for c in line.split() if c.strip(":") and set(c) != {"-"}]
        if cells:
            rows.append(cells)
    return rows


def morton_index(row: int, col: int, ndim: int) -> int:
    """Interleave the bits of ``col`` (dims -1, -3, -5, ...) and ``row`` (dims -2, -4, ...).

    For an all-size-2 tensor with ``ndim`` dims, the element drawn at
    (``row``, ``col``) is the one with this flat index: the picture is a
    Morton (Z-order) curve.

    >>> [morton_index(0, c, 2) for c in range(2)], [morton_index(1, c, 2) for c in range(2)]
    ([0, 1], [2, 3])
    >>> morton_index(1, 1, 4)  # row bit 0 is dim -2, col bit 0 is dim -1
    3
    >>> morton_index(0, 2, 4)  # col bit 1 is dim -3
    4
    """
    index = 0
    col_bits, row_bits = (ndim + 1) // 2, ndim // 2
    for k in range(ndim):  # this is dim -(k + 1)
        source, bit = (col, k // 2) if k % 2 == 0 else (row, k // 2)
        limit = col_bits if k % 2 == 0 else row_bits
        if bit < limit and source >> bit & 1:
            index |= 1 << k
    return index


def split_pieces(shape: Sequence[int], dim: int) -> np.ndarray:
    """Label every element with the piece ``torch.split(x, 1, dim)`` puts it in.

    Pieces are lettered ``a``, ``b``, ... so a drawing of the labels shows
    where the cuts fall.

    >>> from explainers.render import render
    >>> print(render(split_pieces((2, 3), dim=1)))
    a  b  c
    a  b  c
    >>> split_pieces((2, 3), dim=2)
    Traceback (most recent call last):
    ...
    ValueError: split_pieces: dim 2 is out of range for a 2-D shape (2, 3)
    """
    shape = tuple(shape)
    if not -len(shape) <= dim < len(shape):
        raise ValueError(f"split_pieces: dim {dim} is out of range for a {len(shape)}-D shape {shape}")
    if shape[dim] > 26:
        raise ValueError(f"split_pieces: at most 26 pieces can be lettered, dim {dim} has {shape[dim]}")
    index = np.indices(shape)[dim]
    labels = np.empty(shape, dtype=object)
    labels[...] = np.vectorize(lambda i: chr(ord("a") + i), otypes=[object])(index) if index.size else index
    return labels


