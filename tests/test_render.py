"""Unit and property tests for explainers.render and explainers.render_readback."""

from __future__ import annotations

import math
import re
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import explainers.render as render_module
from explainers.render import ELLIPSIS, arange_nd, render
from explainers.render_readback import morton_index, picture_grid, printed_cells, split_pieces

GOLDEN = {
    (2, 2, 2): "0  1    4  5\n2  3    6  7",
    (2, 2, 2, 2): " 0   1     4   5\n 2   3     6   7\n\n 8   9    12  13\n10  11    14  15",
    (2, 2, 2, 2, 2): (
        " 0   1     4   5  :  16  17    20  21\n"
        " 2   3     6   7  :  18  19    22  23\n"
        "                  :\n"
        " 8   9    12  13  :  24  25    28  29\n"
        "10  11    14  15  :  26  27    30  31"
    ),
}


@pytest.mark.parametrize("shape", list(GOLDEN))
def test_golden_pictures(shape):
    assert render(arange_nd(*shape)) == GOLDEN[shape]


def test_six_d_uses_a_dash_line_across_the_full_width():
    lines = render(arange_nd(2, 2, 2, 2, 2, 2)).splitlines()
    dash = [line for line in lines if set(line) == {"-"}]
    assert len(dash) == 1
    assert len(dash[0]) == max(len(line) for line in lines)


def test_separators_keep_growing():
    seven = render(arange_nd(*[2] * 7)).splitlines()
    # dim 0 of 7 is side by side with "::"; the 6-D dash lines sit inside each block.
    assert any(re.fullmatch(r"-+  ::  -+", line) for line in seven)
    eight = render(arange_nd(*[2] * 8))
    assert re.search(r"^-+\n-+$", eight, flags=re.MULTILINE)  # two full-width dash lines
    assert not re.search(r"^-+\n-+\n-+$", eight, flags=re.MULTILINE)


def test_zero_and_one_d():
    assert render(torch.tensor(7)) == "7"
    assert render(arange_nd(3)) == "0  1  2"


def test_cell_width_is_global_and_right_aligned():
    text = render(torch.tensor([[1, 100], [5, 7]]))
    assert text == "  1  100\n  5    7"
    assert render(torch.tensor([1, 2]), cell_width=4) == "   1     2"


def test_dtypes_and_tensor_likes():
    assert render(torch.tensor([True, False])) == " True  False"
    assert render(torch.tensor([0.5, 2.0], dtype=torch.bfloat16)) == "0.5000  2.0000"
    assert render(np.arange(4).reshape(2, 2)) == "0  1\n2  3"
    marker = np.array([[1, 2], [3, "·"]], dtype=object)
    assert render(marker) == "1  2\n3  ·"
    assert render(torch.zeros(0, 3)) == ""


def test_summarizes_large_tensors_like_torch():
    big = arange_nd(100, 100, 100)
    text = render(big)
    assert ELLIPSIS in text and "999999" in text
    grid = picture_grid(text)
    # The matrix keeps 3 + "..." + 3 rows and columns; dim -3 keeps its first and last block
    # with a one-cell "..." column between: 7 + 1 + 7 cells across.
    assert len(grid) == 7 and all(len(row) == 15 for row in grid)
    assert grid[0][:3] == ["0", "1", "2"] and grid[-1][-3:] == ["999997", "999998", "999999"]
    width = max(len(line) for line in text.splitlines())
    torch_width = max(len(line) for line in str(big).splitlines())
    assert width == 122 and torch_width == 66  # was 402 when every dim kept 3 + 3
    assert width <= 2 * torch_width
    full = render(arange_nd(40, 40), summarize=False)
    assert ELLIPSIS not in full and len(full.splitlines()) == 40


def across_bound(ndim: int, edgeitems: int = 3) -> int:
    """Cells across a summary: 2e+1 for the matrix, then 2x+1 per side-by-side dim."""
    cells = 2 * edgeitems + 1 if ndim else 1
    for _ in range(2, ndim, 2):  # dims -3, -5, ...
        cells = 2 * cells + 1
    return cells


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(1, 12), min_size=1, max_size=6).filter(lambda s: 1000 < math.prod(s) <= 60000)
)
def test_summary_width_does_not_grow_with_sizes(shape):
    grid = picture_grid(render(arange_nd(*shape)))
    assert len({len(row) for row in grid}) == 1, "cells line up in every row"
    assert len(grid[0]) <= across_bound(len(shape))
    assert grid[0][0] == "0" and grid[-1][-1] == str(math.prod(shape) - 1)


def test_summary_formats_only_what_it_draws(monkeypatch):
    # However big the tensor, a summary formats only the cells it draws.
    sizes = []
    real = render_module._format_cells

    def counting(shown, *rest):
        sizes.append(shown.size)
        return real(shown, *rest)

    monkeypatch.setattr(render_module, "_format_cells", counting)
    render(arange_nd(100, 100, 100))
    assert sizes == [2 * 6 * 6]


# -- floats read as print(tensor) prints them ---------------------------------------------

MIXED = [
    torch.tensor([[-2.0, 0.5, 123456.7], [1e-3, 3.0, 42.0]]),  # sci mode: max/min > 1000
    torch.tensor([[-2.0, 3.0], [0.0, 7.0]]),  # int mode: "-2."
    torch.tensor([[-2.0, 0.25], [1.5, 100.0]]),  # fixed point
    torch.tensor([float("nan"), float("inf"), -float("inf"), 1.5]),
    torch.tensor([float("nan"), 2.0]),
    torch.tensor([0.0, -0.0]),
    torch.tensor([1e9, 2e9]),  # integral, but over 1e8: sci mode
    torch.tensor([1e-5, 1.0]),
    torch.tensor(1.5),
    torch.tensor([1.5, -2.0], dtype=torch.bfloat16),
    torch.tensor([1.5, -2.0, 1e-3], dtype=torch.float16),
    torch.tensor([1.5, -2.0], dtype=torch.float8_e4m3fn),
    torch.tensor([1.5, -2.0]).double(),
    torch.tensor([1 + 2j, -3.5 - 1j]),
    torch.tensor([[0.5 + 1e-6j, 2.0 - 3j]]),
    torch.tensor([True, False]),
    torch.tensor([-5, 123456]),
]


@pytest.mark.parametrize("t", MIXED, ids=lambda t: f"{t.dtype}-{tuple(t.shape)}")
def test_cells_read_as_torch_prints_them(t):
    assert render(t.reshape(-1), summarize=False).split() == printed_cells(t)


def test_two_d_picture_matches_print():
    t = MIXED[0]
    assert [c for row in picture_grid(render(t)) for c in row] == printed_cells(t)
    assert "1.2346e+05" in render(t) and "-2.0000e+00" in render(t)


finite = st.floats(-2.0**40, 2.0**40, allow_nan=False, width=32)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.one_of(finite, st.sampled_from([0.0, 1e-7, 3.0, float("inf")])), min_size=1, max_size=40)
)
def test_any_float_tensor_formats_like_torch(values):
    t = torch.tensor(values, dtype=torch.float32)
    assert render(t, summarize=False).split() == printed_cells(t)


SPIKED = torch.linspace(0.5, 1.5, 2000)
SPIKED[2] = 1e9  # in torch's summary with edgeitems=3, left out with edgeitems=2


@pytest.mark.parametrize(
    "options, t",
    [
        ({"edgeitems": 2}, SPIKED),
        ({"profile": "short"}, SPIKED),
        ({"threshold": 10}, torch.arange(20)),
        ({"threshold": 10, "edgeitems": 1}, torch.arange(24.0).view(2, 3, 4) / 7),
        ({"profile": "full"}, torch.arange(2000)),
    ],
)
def test_summary_follows_set_printoptions(options, t):
    try:
        torch.set_printoptions(**options)
        drawn = render(t).split()
        if t.ndim == 1:
            assert drawn == printed_cells(t)
        else:  # 3-D pictures are not in print's order: compare the cells drawn and the format
            assert set(drawn) <= set(printed_cells(t)) and ELLIPSIS in drawn
        # Values given to render win over the options.
        assert ELLIPSIS not in render(t, threshold=t.numel())
    finally:
        torch.set_printoptions(profile="default")


def test_explicit_summary_arguments():
    assert render(arange_nd(20), threshold=10, edgeitems=2) == "  0    1  ...   18   19"
    with pytest.raises(ValueError, match="edgeitems must be a positive int, got 0"):
        render(arange_nd(20), threshold=10, edgeitems=0)


def test_summary_chooses_the_format_over_what_torch_shows():
    # A huge value in the middle that torch's summary leaves out does not switch on sci mode...
    t = torch.linspace(0.5, 1.5, 2000)
    t[1000] = 1e12
    assert "e+" not in str(t) and "e+" not in render(t)
    # ... while one that torch's summary shows does, even where render leaves it out
    # (render keeps blocks 0 and 99 of dim -3; torch keeps 0, 1, 2, 97, 98, 99).
    u = torch.full((100, 10, 10), 1.5)
    u[1, 0, 0] = 1e12
    assert "e+" in str(u) and "e+12" not in render(u) and "1.5000e+00" in render(u)
    drawn = {c for row in picture_grid(render(u)) for c in row} - {ELLIPSIS}
    assert drawn <= set(printed_cells(u))


@pytest.mark.parametrize("dtype", [d for d in vars(torch).values() if isinstance(d, torch.dtype)
                                   and d.is_floating_point and d.itemsize == 1], ids=str)
def test_every_byte_of_a_one_byte_float_dtype_draws_as_print_writes_it(dtype):
    # float8_e8m0fnu's byte 0 is 2**-127, which its ne(0) calls zero: print leaves it out of the
    # format's decision, so render picks that dtype's values in the dtype too.  Its NaN converts
    # to a signalling float32 NaN, which must draw without a numpy warning.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for byte in range(256):
            t = torch.tensor([byte, 127, 130], dtype=torch.uint8).view(dtype)
            assert render(t).split() == printed_cells(t), (dtype, byte, str(t))


def test_e8m0_byte_zero_is_written_as_print_writes_it():
    e8m0 = torch.tensor([0, 127, 130], dtype=torch.uint8).view(torch.float8_e8m0fnu)
    assert render(e8m0) == "0.  1.  8."


def test_object_arrays_share_one_float_format():
    marker = np.array([[1.5, 100.25], [2.0, "·"]], dtype=object)
    assert picture_grid(render(marker)) == [["1.5000", "100.2500"], ["2.0000", "·"]]



def test_printed_cells_needs_a_tensor():
    with pytest.raises(ValueError, match="expected a torch.Tensor, got ndarray"):
        printed_cells(np.arange(3))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"cell_width": 0}, "cell_width must be a positive int"),
        ({"cell_width": -3}, "cell_width must be a positive int"),
        ({"cell_width": 1.5}, "cell_width must be a positive int"),
        ({"cell_width": 1}, "narrower than the value '10'"),
    ],
)
def test_bad_cell_width(kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        render(arange_nd(4, 4), **kwargs)


@pytest.mark.parametrize("bad", [[1, 2], "abc", 3, None])
def test_non_tensor_input_is_named(bad):
    with pytest.raises(TypeError, match=type(bad).__name__):
        render(bad)


def test_arange_nd_rejects_a_float_size():
    with pytest.raises(ValueError, match="non-negative ints"):
        arange_nd(2.5)


shapes = st.lists(st.integers(1, 4), min_size=0, max_size=8).filter(lambda s: math.prod(s) <= 2000)


@settings(max_examples=60, deadline=None)
@given(shapes)
def test_every_value_appears_exactly_once(shape):
    x = arange_nd(*shape)
    cells = [int(c) for row in picture_grid(render(x, summarize=False)) for c in row]
    assert sorted(cells) == list(range(x.numel()))


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 9))
def test_size_two_reading_order_is_morton(ndim):
    grid = picture_grid(render(arange_nd(*[2] * ndim)))
    assert all(int(v) == morton_index(r, c, ndim) for r, row in enumerate(grid) for c, v in enumerate(row))


@settings(max_examples=40, deadline=None)
@given(shapes.filter(lambda s: len(s) >= 3))
def test_every_row_of_a_full_drawing_has_the_same_number_of_cells(shape):
    # Blocks joined side by side line up: read back, each row has as many cells as the others.
    grid = picture_grid(render(arange_nd(*shape), summarize=False))
    assert len({len(row) for row in grid}) == 1


def test_split_pieces_match_torch_split():
    x = arange_nd(2, 3, 2)
    for dim in range(3):
        labels = split_pieces(x.shape, dim)
        for i, piece in enumerate(torch.split(x, 1, dim)):
            mask = torch.from_numpy(labels == chr(ord("a") + i))
            assert sorted(x[mask].tolist()) == sorted(piece.flatten().tolist())


# -- a summary reads only what torch's summary shows; unreadable kinds are named --------------

SUMMARIZED = [
    torch.linspace(-3, 5e4, 6000).view(3, 2000),
    torch.linspace(0.5, 1.5, 5000, dtype=torch.bfloat16).view(5, 10, 100),
    torch.linspace(-2, 2, 3000).to(torch.float8_e4m3fn).view(30, 100),
    torch.complex(torch.linspace(-1, 1, 4000), torch.linspace(3, 1e5, 4000)).view(2, 2, 10, 100).conj(),
    torch.complex(torch.linspace(-1, 1, 2000), torch.linspace(3, 9, 2000)).conj().imag.view(4, 500),
    torch.arange(1_000_000).view(100, 100, 100) % 7 == 0,
    torch.arange(5 * 6 * 7 * 8 * 9).view(5, 6, 7, 8, 9),
]


@pytest.mark.parametrize("t", SUMMARIZED, ids=lambda t: f"{t.dtype}-{tuple(t.shape)}")
def test_summary_reads_only_what_torch_shows_and_draws_the_same(t, monkeypatch):
    # The old path converted the whole tensor to numpy first; a numpy array still takes it.
    if t.dtype in (torch.bfloat16, torch.float8_e4m3fn):
        whole = t.float().numpy()
    else:
        whole = t.resolve_conj().resolve_neg().numpy()
    expected = render(whole)
    read = []
    real = torch.Tensor.numpy

    def counting(self, *args, **kwargs):
        read.append(self.numel())
        return real(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "numpy", counting)
    assert render(t) == expected
    shown = math.prod(min(n, 6) for n in t.shape)  # edgeitems=3 at each end of every dim
    assert read == [shown] and shown < t.numel()
    monkeypatch.undo()
    if t.ndim <= 2:  # the same cells as print(tensor), ellipses aside
        assert [c for c in render(t).split() if c != ELLIPSIS] == [
            c for c in printed_cells(t) if c != ELLIPSIS
        ]


def _fake():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        return torch.ones(2, 2)


def _quantized():
    import warnings

    with warnings.catch_warnings():  # 2.15.0 warns that quantized creation is deprecated
        warnings.simplefilter("ignore")
        return torch.quantize_per_tensor(torch.ones(2, 2), 0.1, 0, torch.quint8)


UNREADABLE = {
    "sparse_coo": lambda: torch.ones(2, 2).to_sparse(),
    "_mkldnn": lambda: torch.ones(2, 2).to_mkldnn(),
    "nested": lambda: torch.nested.nested_tensor([torch.ones(2), torch.ones(3)], layout=torch.jagged),
    "meta": lambda: torch.ones(2, 2, device="meta"),
    "quantized": _quantized,
    "fake": _fake,
}


@pytest.mark.parametrize("kind", UNREADABLE)
def test_unreadable_kinds_are_named(kind):
    t = UNREADABLE[kind]()
    with pytest.raises(TypeError, match=f"not a {re.escape(kind)} tensor"):
        render(t)


def test_a_subclass_is_named_once_and_refused():
    class Sub(torch.Tensor):
        pass

    with pytest.raises(TypeError, match=r"not a Sub \(a tensor subclass\): draw a plain tensor"):
        render(torch.ones(2).as_subclass(Sub))


@pytest.mark.parametrize("view", ["conj", "neg", "complex32-conj"])
def test_a_summarized_conjugate_or_negative_view_is_copied_only_where_kept(view):
    z = torch.complex(torch.linspace(-1, 1, 1_000_000), torch.linspace(3, 9, 1_000_000)).view(1000, 1000)
    if view == "complex32-conj":
        with warnings.catch_warnings():  # torch warns that complex32 is experimental
            warnings.simplefilter("ignore", UserWarning)
            z = z.to(torch.complex32)
    t = z.conj().imag if view == "neg" else z.conj()
    assert t.is_neg() if view == "neg" else t.is_conj()
    with torch.profiler.profile(record_shapes=True) as prof:
        drawing = render(t)
    copied = [
        math.prod(e.input_shapes[0])
        for e in prof.events()
        if e.name in ("aten::clone", "aten::copy_", "aten::index_select") and e.input_shapes
    ]
    # Every block of kept indices (3 x 3, edgeitems=3) is resolved alone: no full-size copy.
    assert copied and max(copied) <= 36, copied
    assert [c for c in drawing.split() if c != ELLIPSIS] == [c for c in printed_cells(t) if c != ELLIPSIS]


def test_vmap_and_grad_wrapped_and_parameters():
    def f(x):
        with pytest.raises(TypeError, match="not a torch.func-wrapped tensor"):
            render(x)
        return x.sum()

    torch.func.grad(f)(torch.ones(3))
    torch.vmap(f)(torch.ones(3, 2))
    assert render(torch.nn.Parameter(torch.ones(2))) == "1.  1."
