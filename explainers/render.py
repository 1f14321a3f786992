"""Draw an N-D tensor as a matrix of matrices.

The layout of Edward Z. Yang's post "Draw high dimensional tensors as a matrix of matrices"
(https://blog.ezyang.com/2025/10/draw-high-dimensional-tensors-as-a-matrix-of-matrices/).
Dims are numbered as in PyTorch (negative from the last). The last two dims form a matrix;
every dim before them lays out the blocks of the dims after it, alternating side by side and
top to bottom, with a separator that grows so an outer dim separates more strongly:

==============  ============  =====================================
dim             direction     separator between neighbouring blocks
==============  ============  =====================================
-1              columns       two spaces between cells
-2              rows          newline
-3              side by side  four spaces
-4              top to bottom one blank line
-5, -7, -9 ...  side by side  ``  :  ``, ``  ::  ``, ... (one more ``:`` every 2 dims)
-6, -8, ...     top to bottom one, two, ... full-width lines of dashes
==============  ============  =====================================

The post's examples stop at 5-D; from dim -6 on the table extends its rule.
This file needs only torch, numpy and the standard library: copy it alone and
run it (``python render.py`` prints a drawing).

>>> print(render(arange_nd(2, 2, 2, 2)))
 0   1     4   5
 2   3     6   7
<BLANKLINE>
 8   9    12  13
10  11    14  15
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

__all__ = ["ELLIPSIS", "SCI_MODE_LIMITS", "arange_nd", "render"]

#: The cell that stands for the elements a summary leaves out.
ELLIPSIS = "..."

#: When torch's printer picks sci mode by itself: over the nonzero finite values, the largest
#: magnitude over this many times the smallest, or over the second number, or the smallest
#: under the third (the literals of ``torch._tensor_str._Formatter`` in 2.14.1 and 2.15.0).
SCI_MODE_LIMITS = (1000.0, 1.0e8, 1.0e-4)


def arange_nd(*sizes: int | Sequence[int]):
    """Return ``torch.arange(prod(sizes)).view(sizes)``.

    Accepts several ints or one tuple (or ``torch.Size``):

    >>> import torch
    >>> arange_nd(2, 3)
    tensor([[0, 1, 2],
            [3, 4, 5]])
    >>> arange_nd((2, 3)).shape
    torch.Size([2, 3])
    >>> arange_nd(torch.Size([4]))
    tensor([0, 1, 2, 3])
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
    threshold: int | None = None,
    edgeitems: int | None = None,
) -> str:
    """Return the matrix-of-matrices drawing of ``tensor`` as a string.

    Args:
        tensor: a dense ``torch.Tensor`` (sparse, quantized, meta, nested, subclass and
            torch.func-wrapped tensors raise ``TypeError``), a numpy array (object arrays of
            numbers or strings included: uneven data padded with a marker), or anything else
            with ``.shape`` that numpy can convert.  An empty tensor draws as ``''``.
        cell_width: width of every cell, values right-aligned; ``None``: the widest cell drawn.
        summarize: like torch's printer, draw a summary once the tensor has more than
            ``threshold`` elements.  ``summarize=False`` draws everything.
        threshold: element count above which a summary is drawn.
        edgeitems: elements kept at each end of a long dim among the last two.  ``None`` (for
            both) means the value set with ``torch.set_printoptions``, as ``print(tensor)`` uses.

    Every element reads as it does in ``print(tensor)`` (checked on CPU; on CUDA torch's printer
    decides in float64 too, as read from its source): the floats share one
    format (a complex tensor: one for the real, one for the imaginary parts) chosen over the
    tensor (in a summary, over what torch's summary shows), following ``precision`` and
    ``sci_mode`` of ``torch.set_printoptions``.

    In a summary, a long dim among the last two keeps ``edgeitems`` at each
    end with a ``...`` between, as torch's printer does; a dim before them
    keeps only its first and last block (torch keeps ``edgeitems`` blocks at
    each end), so each side-by-side dim draws at most two blocks and a ``...``.
    Only the elements torch's summary shows are read, upcast and copied to host.

    Three dims put the 2-D blocks side by side:

    >>> print(render(arange_nd(2, 2, 3)))
     0   1   2     6   7   8
     3   4   5     9  10  11

    0-D and 1-D tensors, floats and bools:

    >>> render(arange_nd())
    '0'
    >>> import torch
    >>> print(render(torch.tensor([1.5, -2.0, 0.25])))
     1.5000  -2.0000   0.2500
    >>> print(render(torch.tensor([-2.0, 3.0])))  # integral floats, as torch prints them
    -2.   3.
    >>> print(render(torch.tensor([[True, False]])))
     True  False

    A large tensor is summarized:

    >>> print(render(arange_nd(4000)))
       0     1     2   ...  3997  3998  3999

    3 x 10 x 40 is 1200 elements, over the default threshold of 1000: dim -3 keeps its
    first and last block, the rows and the columns their first and last 3 (``edgeitems``):

    >>> print(render(arange_nd(3, 10, 40)))
       0     1     2   ...    37    38    39     ...     800   801   802   ...   837   838   839
      40    41    42   ...    77    78    79     ...     840   841   842   ...   877   878   879
      80    81    82   ...   117   118   119     ...     880   881   882   ...   917   918   919
     ...   ...   ...   ...   ...   ...   ...     ...     ...   ...   ...   ...   ...   ...   ...
     280   281   282   ...   317   318   319     ...    1080  1081  1082   ...  1117  1118  1119
     320   321   322   ...   357   358   359     ...    1120  1121  1122   ...  1157  1158  1159
     360   361   362   ...   397   398   399     ...    1160  1161  1162   ...  1197  1198  1199

    ``threshold`` and ``edgeitems`` can be given instead of the print options:

    >>> print(render(arange_nd(3, 4, 5), threshold=50, edgeitems=1))
      0  ...    4    ...     40  ...   44
    ...  ...  ...    ...    ...  ...  ...
     15  ...   19    ...     55  ...   59
    >>> render(torch.ones(2, device="meta"))
    Traceback (most recent call last):
    ...
    TypeError: render() reads only dense tensors, not a meta tensor: it has no values
    >>> render([1.5, -2.0])
    Traceback (most recent call last):
    ...
    TypeError: render() expects a tensor or array with a .shape, got list; wrap it with torch.tensor(...)
    """
    from torch import _tensor_str

    values = _readable(tensor)
    # torch 2.14.1 and 2.15.0 export no get_printoptions: print(tensor) reads the options from the
    # private torch._tensor_str, so render follows torch.set_printoptions there as print does.
    opts = _tensor_str.get_printoptions()
    threshold = opts["threshold"] if threshold is None else threshold
    edgeitems = opts["edgeitems"] if edgeitems is None else edgeitems
    shape = tuple(values.shape)
    gaps: tuple[int | None, ...] = (None,) * len(shape)
    if summarize and shape and math.prod(shape) > threshold:
        if not isinstance(edgeitems, int) or isinstance(edgeitems, bool) or edgeitems < 1:
            raise ValueError(f"render: edgeitems must be a positive int, got {edgeitems!r}")
        # Read only what torch's summary shows (a superset of ours; it chooses the float format,
        # so cells read as in print(tensor)): a large tensor is not upcast or copied whole.
        torch_keeps = _summary_indices(shape, edgeitems, edgeitems)[0]
        shown, gaps = _summary_indices(shape, edgeitems)
        values, keep = _to_numpy(values, torch_keeps)
        at = [np.searchsorted(k, s) for k, s in zip(torch_keeps, shown, strict=True)]
        cells = _format_cells(values[np.ix_(*at)], values, opts, keep)
    else:
        values, keep = _to_numpy(values)
        cells = _format_cells(values, values, opts, keep)
    if cells.size == 0:
        return ""
    drawn = [*cells.flat, *([ELLIPSIS] if any(g is not None for g in gaps) else [])]
    width = max(len(c) for c in drawn)
    if cell_width is not None:
        if not isinstance(cell_width, int) or isinstance(cell_width, bool) or cell_width <= 0:
            raise ValueError(f"render: cell_width must be a positive int, got {cell_width!r}")
        if cell_width < width:
            raise ValueError(
                f"render: cell_width={cell_width} is narrower than the value {max(drawn, key=len)!r} "
                f"({width} characters); pass cell_width>={width} or leave it None"
            )
        width = cell_width
    return "\n".join(line.rstrip() for line in _layout(cells, width, gaps))


# -- input handling ---------------------------------------------------------------


def _readable(tensor: Any) -> Any:
    """A detached dense ``torch.Tensor`` or a numpy array; a ``TypeError`` names any other kind."""
    if not hasattr(tensor, "shape"):
        raise TypeError(
            f"render() expects a tensor or array with a .shape, got {type(tensor).__name__}; "
            "wrap it with torch.tensor(...)"
        )
    import torch

    if not isinstance(tensor, torch.Tensor):
        try:
            return np.asarray(tensor)
        except Exception as exc:  # noqa: BLE001 - re-raised with a clearer message
            raise TypeError(f"render() could not read {type(tensor).__name__} as an array: {exc}") from exc
    t = tensor.detach()
    # private (2.14.1, 2.15.0): true inside vmap, grad, jvp, vjp, jacrev, jacfwd and functionalize
    wrapped = torch._C._functorch.is_functorch_wrapped_tensor
    for refused, kind, hint in (  # torch._subclasses.FakeTensor: private, in 2.14.1 and 2.15.0
        (t.is_nested, "a nested tensor", "draw each of t.unbind()"),
        (t.is_meta, "a meta tensor", "it has no values"),
        (isinstance(t, torch._subclasses.FakeTensor), "a fake tensor", "it has no values"),
        (t.is_quantized, "a quantized tensor", "draw t.dequantize()"),
        (t.layout != torch.strided, f"a {str(t.layout)[6:]} tensor", "draw t.to_dense()"),
        (wrapped(t), "a torch.func-wrapped tensor", "draw it outside the torch.func transform"),
        (type(t) is not torch.Tensor, f"a {type(t).__name__} (a tensor subclass)",
         "draw a plain tensor made from it (a DTensor's .full_tensor())"),
    ):
        if refused:
            raise TypeError(f"render() reads only dense tensors, not {kind}: {hint}")
    return t


def _to_numpy(values: Any, keeps: Sequence[np.ndarray] | None = None) -> tuple[np.ndarray, Any]:
    """``values`` (from :func:`_readable`) as numpy, only the indices ``keeps`` of each dim, and
    which of them print's float format decides over where float64 would pick others (else None).

    Cut first, so only kept elements are upcast (bfloat16, float8 to float32; complex32 to
    complex64: exact) and copied to host: every block of kept indices is a ``narrow`` view (of a
    conjugate or negative view too), resolved alone and joined with ``cat``, much as torch's
    ``get_summarized_data`` does; ``index_select`` would first resolve such a view whole."""
    if isinstance(values, np.ndarray):
        return (values[np.ix_(*keeps)] if keeps else values), None
    import torch

    half = values.dtype == torch.complex32  # joined as its int32 bits: most ops warn on it

    def cut(t: Any, d: int) -> Any:  # dims d, d+1, ... cut to the runs of their kept indices
        if d == len(keeps):
            t = t.resolve_conj().resolve_neg()
            return t.view(torch.int32) if half else t
        runs = np.split(keeps[d], np.flatnonzero(np.diff(keeps[d]) != 1) + 1)
        return torch.cat([cut(t.narrow(d, int(r[0]), len(r)), d + 1) for r in runs], d)

    t = (cut(values, 0).view(torch.complex32) if half else cut(values, 0)) if keeps else values
    keep = None
    # torch 2.14.1/2.15.0 print this packed dtype (no casts) as its uint8 bytes; getattr: older torch.
    if t.dtype == getattr(torch, "float4_e2m1fn_x2", None):
        t = t.view(torch.uint8).float()
    elif t.is_floating_point() and t.dtype not in (torch.float16, torch.float32, torch.float64):
        if t.dtype == getattr(torch, "float8_e8m0fnu", None):  # print (2.14.1, 2.15.0) picks its
            keep = (torch.isfinite(t) & t.ne(0)).cpu().numpy()  # values in it: byte 0 == 0 there
        t = t.float()
    elif t.is_complex() and t.dtype not in (torch.complex64, torch.complex128):
        t = t.to(torch.complex64)
    return t.cpu().resolve_conj().resolve_neg().numpy(), keep


# -- formatting: the rule of torch's printer -------------------------------------------


def _float_format(values: Any, opts: dict[str, Any], keep: Any = None) -> Callable[[float], str]:
    """One format for all the floats of a tensor, chosen the way ``print(tensor)`` chooses it.

    A copy (not a call) of the rule of the private ``torch._tensor_str._Formatter`` in torch
    2.14.1 and 2.15.0, deciding in float64 as torch does on CPU and CUDA: over the nonzero
    finite values, *int mode* holds when all are integral, *sci mode* by :data:`SCI_MODE_LIMITS`
    unless ``opts["sci_mode"]`` is set.  Sci mode, tested first, writes ``precision`` digits
    after the point in ``e`` notation; int mode the integer and a ``.``; else ``precision`` decimals.
    ``keep``, a boolean mask like ``values``, replaces float64's choice of the nonzero finite values.
    """
    precision = opts["precision"]
    # A signalling NaN (float8_e8m0fnu's NaN converts to one, 0x7f800001, in torch 2.14.1 and
    # 2.15.0) sets numpy's invalid flag when cast; print writes it as nan without a warning.
    with np.errstate(invalid="ignore"):
        flat = np.asarray(values, dtype=np.float64).reshape(-1)
    chosen = np.isfinite(flat) & (flat != 0) if keep is None else np.asarray(keep, dtype=bool).reshape(-1)
    nonzero_finite = flat[chosen]
    int_mode, sci_mode = True, False
    if nonzero_finite.size:  # torch keeps both defaults when there is no such value
        int_mode = bool(np.all(nonzero_finite == np.ceil(nonzero_finite)))
        magnitude = np.abs(nonzero_finite)
        hi, lo = float(magnitude.max()), float(magnitude.min())
        if opts["sci_mode"] is None:
            ratio, most, least = SCI_MODE_LIMITS
            sci_mode = hi / lo > ratio or hi > most or lo < least
        else:
            sci_mode = bool(opts["sci_mode"])

    def fmt(value: float) -> str:
        if sci_mode:
            return f"{value:.{precision}e}"
        if int_mode:
            return f"{value:.0f}" + ("." if math.isfinite(value) else "")
        return f"{value:.{precision}f}"

    return fmt


def _format_cells(shown: np.ndarray, decide: np.ndarray, opts: dict[str, Any], keep: Any = None) -> np.ndarray:
    """Format ``shown`` with the float format chosen over ``decide`` (a superset of it; ``keep``
    as in :func:`_float_format`)."""
    flat = shown.reshape(-1).tolist()
    kind = shown.dtype.kind
    if kind == "f":
        fmt = _float_format(decide, opts, keep)
        text = [fmt(v) for v in flat]
    elif kind == "c":
        # torch formats the real and the imaginary parts with one format each.
        real, imag = _float_format(decide.real, opts), _float_format(decide.imag, opts)
        ims = [imag(z.imag) + "j" for z in flat]
        text = [real(z.real) + (im if im[0] in "+-" else "+" + im) for z, im in zip(flat, ims, strict=True)]
    elif kind == "O":
        # Mixed data (numbers padded with a marker string): strings as they are, and the
        # floats among the numbers share one format, as in a float tensor.
        floats = float | np.floating
        fmt = _float_format([v for v in decide.reshape(-1).tolist() if isinstance(v, floats)], opts)
        text = [fmt(v) if isinstance(v, floats) else str(v) for v in flat]
    else:  # ints, bools and strings print as str() does, which is what torch prints
        text = [str(v) for v in flat]
    cells = np.empty(len(text), dtype=object)
    cells[:] = text
    return cells.reshape(shown.shape)


# -- summaries --------------------------------------------------------------------------


def _summary_indices(
    shape: tuple[int, ...], edgeitems: int, outer: int = 1
) -> tuple[list[np.ndarray], tuple[int | None, ...]]:
    """The indices a summary keeps for each dim, and where each dim's ``...`` goes.

    The last two dims keep ``edgeitems`` at each end, a dim before them ``outer`` blocks at
    each end (render keeps one); ``outer=edgeitems`` gives what torch's summary keeps
    (``get_summarized_data`` in torch 2.14.1 and 2.15.0)."""
    keep, gaps = [], []
    for d, n in enumerate(shape):
        ends = edgeitems if d >= len(shape) - 2 else outer
        cut = n > 2 * ends
        keep.append(np.r_[0:ends, n - ends : n] if cut else np.arange(n))
        gaps.append(ends if cut else None)
    return keep, tuple(gaps)


# -- layout -------------------------------------------------------------------------


def _layout(cells: np.ndarray, width: int, gaps: tuple[int | None, ...]) -> list[str]:
    """Lines of the drawing of ``cells``; axis 0 of an N-D array is dim -N, the outermost;
    ``gaps[d]`` is where the ``...`` of a summarized axis ``d`` goes, or ``None``."""
    if cells.ndim == 0:
        return [cells.item().rjust(width)]
    k = cells.ndim - 1  # this axis is dim -(k + 1)
    # cells[i, ...] keeps a 0-D array (iterating a 1-D object array would yield bare strings).
    parts = [_layout(cells[i, ...], width, gaps[1:]) for i in range(len(cells))]
    if gaps[0] is not None:
        parts.insert(gaps[0], _ellipsis_block(cells.shape[1:], gaps[1:], width, across=k % 2 == 0))
    if k == 0:
        return ["  ".join(p[0] for p in parts)]
    if k == 1:
        return [line for p in parts for line in p]
    if k % 2 == 0:
        return _join_horizontal(parts, "    " if k == 2 else f"  {':' * ((k - 2) // 2)}  ")
    return _join_vertical(parts, rules=(k - 3) // 2)


def _ellipsis_block(shape: tuple[int, ...], gaps: tuple[int | None, ...], width: int, across: bool) -> list[str]:
    """The ``...`` for omitted blocks of the given shape: between side-by-side blocks one cell
    wide and a block tall, between stacked blocks one cell tall and a block wide."""
    m = len(shape)
    # Axis j of a block is dim -(m - j); even distances from the last dim run across.
    collapse = [((m - 1 - j) % 2 == 0) == across for j in range(m)]
    filler_shape = tuple(1 if c else n for c, n in zip(collapse, shape, strict=True))
    filler_gaps = tuple(None if c else g for c, g in zip(collapse, gaps, strict=True))
    return _layout(np.full(filler_shape, ELLIPSIS, dtype=object), width, filler_gaps)


def _join_horizontal(blocks: list[list[str]], sep: str) -> list[str]:
    height = max(len(b) for b in blocks)
    widths = [max(len(line) for line in b) for b in blocks]
    padded = [b + [""] * (height - len(b)) for b in blocks]
    return [sep.join(b[i].ljust(w) for b, w in zip(padded, widths, strict=True)) for i in range(height)]


def _join_vertical(blocks: list[list[str]], rules: int) -> list[str]:
    # rules == 0: a blank line between blocks; otherwise that many dash lines.
    width = max(len(line) for b in blocks for line in b)
    sep = [""] if rules == 0 else ["-" * width] * rules
    return [*blocks[0], *(line for b in blocks[1:] for line in sep + b)]


if __name__ == "__main__":
    # A 2 x 3 x 4 tensor: dim -3 puts its two 3 x 4 matrices side by side.
    print(render(arange_nd(2, 3, 4)))
