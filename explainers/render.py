"""Draw an N-D tensor as a matrix of matrices.

This implements the layout from Edward Z. Yang's post "Draw high dimensional
tensors as a matrix of matrices" (blog.ezyang.com, 2025-10-25).  Working
outward from the last dimension, the dims alternate between laying blocks out
side by side and stacking them vertically, and the separator between blocks
grows with the dimension:

=====================  ===========  =====================================
dim (counted from the  direction    separator between neighbouring blocks
last one, ``k``)
=====================  ===========  =====================================
0                      columns      two spaces between cells
1                      rows         newline
2                      horizontal   four spaces
3                      vertical     one blank line
4, 6, 8, ...           horizontal   ``  :  ``, ``  ::  ``, ... (one more ``:`` every 2 dims)
5, 7, 9, ...           vertical     one, two, ... full-width lines of dashes
=====================  ===========  =====================================

>>> print(render(arange_nd(2, 2, 2, 2)))
 0   1     4   5
 2   3     6   7
<BLANKLINE>
 8   9    12  13
10  11    14  15
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["ELLIPSIS", "arange_nd", "morton_index", "picture_grid", "render", "split_pieces"]

#: The cell that stands for the elements a summary leaves out.
ELLIPSIS = "..."


def arange_nd(*sizes: int | Sequence[int]):
    """Return ``torch.arange(prod(sizes)).view(sizes)``.

    Accepts several ints or one tuple (or ``torch.Size``):

    >>> arange_nd(2, 3)
    tensor([[0, 1, 2],
            [3, 4, 5]])
    >>> arange_nd((2, 3)).shape
    torch.Size([2, 3])
    >>> arange_nd(15).shape
    torch.Size([15])
    >>> arange_nd(2, -1)
    Traceback (most recent call last):
    ...
    ValueError: arange_nd: sizes must be non-negative ints, got (2, -1)
    """
    import torch

    if len(sizes) == 1 and isinstance(sizes[0], Sequence | torch.Size):
        sizes = tuple(sizes[0])
    if not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in sizes):
        raise ValueError(f"arange_nd: sizes must be non-negative ints, got {tuple(sizes)!r}")
    return torch.arange(math.prod(sizes)).view(sizes)


def render(
    tensor: Any,
    cell_width: int | None = None,
    *,
    summarize: bool = True,
    threshold: int = 1000,
    edgeitems: int = 3,
) -> str:
    """Return the matrix-of-matrices drawing of ``tensor`` as a string.

    Args:
        tensor: a ``torch.Tensor``, a numpy array (object arrays of numbers or
            strings included, which is how uneven data is padded with a marker),
            or anything else with ``.shape`` that numpy can convert.
        cell_width: width of every cell.  Computed once for the whole tensor
            when ``None``; values are right-aligned to it.
        summarize: like torch's printer, show only ``edgeitems`` at each end of
            every dim, with an ``...`` cell between, once the tensor has more
            than ``threshold`` elements.  ``summarize=False`` draws everything.
        threshold: element count above which a summary is drawn.
        edgeitems: elements kept at each end of a summarized dim.

    Three dims put the 2-D blocks side by side:

    >>> print(render(arange_nd(2, 2, 3)))
     0   1   2     6   7   8
     3   4   5     9  10  11

    0-D and 1-D tensors, floats and bools:

    >>> render(arange_nd())
    '0'
    >>> print(render([1.5, -2.0]))
    Traceback (most recent call last):
    ...
    TypeError: render() expects a tensor or array with a .shape, got list; wrap it with torch.tensor(...)
    >>> import torch
    >>> print(render(torch.tensor([1.5, -2.0, 0.25])))
     1.5    -2  0.25
    >>> print(render(torch.tensor([[True, False]])))
     True  False

    A large tensor is summarized per dim:

    >>> print(render(arange_nd(4000)))
       0     1     2   ...  3997  3998  3999
    """
    values = _as_array(tensor)
    if summarize and values.size > threshold:
        cells = _summarized_cells(values, edgeitems)
    else:
        cells = _format_cells(values)
    if cells.size == 0:
        return ""
    width = max(len(c) for c in cells.flat)
    if cell_width is not None:
        if not isinstance(cell_width, int) or isinstance(cell_width, bool) or cell_width <= 0:
            raise ValueError(f"render: cell_width must be a positive int, got {cell_width!r}")
        if cell_width < width:
            widest = max(cells.flat, key=len)
            raise ValueError(
                f"render: cell_width={cell_width} is narrower than the value {widest!r} "
                f"({width} characters); pass cell_width>={width} or leave it None"
            )
        width = cell_width
    lines = _layout(cells, width)
    return "\n".join(line.rstrip() for line in lines)


# -- input handling ---------------------------------------------------------------


def _as_array(tensor: Any) -> np.ndarray:
    """Convert ``tensor`` to a numpy array without losing values.

    Low-precision torch dtypes that numpy lacks (bfloat16, float8) go through
    float32, which holds them exactly.
    """
    if not hasattr(tensor, "shape"):
        raise TypeError(
            f"render() expects a tensor or array with a .shape, got {type(tensor).__name__}; "
            "wrap it with torch.tensor(...)"
        )
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a hard dependency
        torch = None
    if torch is not None and isinstance(tensor, torch.Tensor):
        t = tensor.detach()
        if t.is_floating_point() and t.dtype not in (torch.float16, torch.float32, torch.float64):
            t = t.float()
        return t.cpu().resolve_conj().resolve_neg().numpy()
    try:
        return np.asarray(tensor)
    except Exception as exc:  # noqa: BLE001 - re-raised with a clearer message
        raise TypeError(
            f"render() could not read {type(tensor).__name__} as an array: {exc}"
        ) from exc


def _format_value(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool | np.bool_):
        return str(bool(value))
    if isinstance(value, int | np.integer):
        return str(int(value))
    if isinstance(value, float | np.floating):
        return f"{float(value):.4g}"
    return str(value)


def _format_cells(values: np.ndarray) -> np.ndarray:
    flat = [_format_value(v) for v in values.reshape(-1).tolist()]
    cells = np.empty(len(flat), dtype=object)
    cells[:] = flat
    return cells.reshape(values.shape)


def _summarized_cells(values: np.ndarray, edgeitems: int) -> np.ndarray:
    """Format only the edge items of every long dim, then insert ``...`` slices."""
    if not isinstance(edgeitems, int) or edgeitems < 1:
        raise ValueError(f"render: edgeitems must be a positive int, got {edgeitems!r}")
    long_dims = [d for d, n in enumerate(values.shape) if n > 2 * edgeitems]
    keep = [
        np.r_[0:edgeitems, n - edgeitems : n] if d in long_dims else np.arange(n)
        for d, n in enumerate(values.shape)
    ]
    cells = _format_cells(values[np.ix_(*keep)])
    for d in long_dims:
        cells = np.insert(cells, edgeitems, ELLIPSIS, axis=d)
    return cells


# -- layout -------------------------------------------------------------------------


def _layout(cells: np.ndarray, width: int) -> list[str]:
    """Lines of the drawing of ``cells``; dim 0 of an N-D array is the outermost."""
    if cells.ndim == 0:
        return [cells.item().rjust(width)]
    if cells.ndim == 1:
        return ["  ".join(c.rjust(width) for c in cells)]
    if cells.ndim == 2:
        return [line for row in cells for line in _layout(row, width)]
    blocks = [_layout(sub, width) for sub in cells]
    k = cells.ndim - 1  # this dim's distance from the last dim
    if k % 2 == 0:
        return _join_horizontal(blocks, "    " if k == 2 else f"  {':' * ((k - 2) // 2)}  ")
    return _join_vertical(blocks, rules=(k - 3) // 2)


def _join_horizontal(blocks: list[list[str]], sep: str) -> list[str]:
    height = max(len(b) for b in blocks)
    widths = [max(len(line) for line in b) for b in blocks]
    padded = [b + [""] * (height - len(b)) for b in blocks]
    return [
        sep.join(b[i].ljust(w) for b, w in zip(padded, widths, strict=True))
        for i in range(height)
    ]


def _join_vertical(blocks: list[list[str]], rules: int) -> list[str]:
    # rules == 0: a blank line between blocks; otherwise that many dash lines.
    width = max(len(line) for b in blocks for line in b)
    sep = [""] if rules == 0 else ["-" * width] * rules
    out: list[str] = []
    for i, b in enumerate(blocks):
        if i:
            out.extend(sep)
        out.extend(b)
    return out


# -- reading pictures back ------------------------------------------------------------


def picture_grid(text: str) -> list[list[str]]:
    """The cells of a drawing, row by row, with every separator removed.

    Blank lines, ``:`` columns and dash lines are layout, not data, so
    reading a picture back gives the 2-D grid a reader's eye sees.

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
    """Interleave the bits of ``col`` (dims 0, 2, 4, ... from the last) and ``row``.

    For an all-size-2 tensor with ``ndim`` dims, the element drawn at
    (``row``, ``col``) is the one with this flat index: the picture is a
    Morton (Z-order) curve.

    >>> [morton_index(0, c, 2) for c in range(2)], [morton_index(1, c, 2) for c in range(2)]
    ([0, 1], [2, 3])
    >>> morton_index(1, 1, 4)  # row 1 is dim 2, col 1 is dim 3
    3
    >>> morton_index(0, 2, 4)  # col bit 1 is dim 1
    4
    """
    index = 0
    col_bits, row_bits = (ndim + 1) // 2, ndim // 2
    for k in range(ndim):  # k counts dims from the last one
        source, bit = (col, k // 2) if k % 2 == 0 else (row, k // 2)
        limit = col_bits if k % 2 == 0 else row_bits
        if bit < limit and source >> bit & 1:
            index |= 1 << k
    return index


def split_pieces(shape: Sequence[int], dim: int) -> np.ndarray:
    """Label every element with the piece ``torch.split(x, 1, dim)`` puts it in.

    Pieces are lettered ``a``, ``b``, ... so a drawing of the labels shows
    where the cuts fall.

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
