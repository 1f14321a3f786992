"""Unit and property tests for explainers.render."""

from __future__ import annotations

import math
import re
import time

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from explainers.render import (
    ELLIPSIS,
    arange_nd,
    morton_index,
    picture_grid,
    render,
    split_pieces,
)

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
    assert render(torch.tensor([0.5, 2.0], dtype=torch.bfloat16)) == "0.5    2"
    assert render(np.arange(4).reshape(2, 2)) == "0  1\n2  3"
    marker = np.array([[1, 2], [3, "·"]], dtype=object)
    assert render(marker) == "1  2\n3  ·"
    assert render(torch.zeros(0, 3)) == ""


def test_summarizes_large_tensors_like_torch():
    text = render(arange_nd(100, 100, 100))
    assert ELLIPSIS in text and "999999" in text
    grid = picture_grid(text)
    # 3-D: dim 0 lays 7 blocks (3, "...", 3) side by side, each 7 rows x 7 columns.
    assert len(grid) == 7 and all(len(row) == 7 * 7 for row in grid)
    full = render(arange_nd(40, 40), summarize=False)
    assert ELLIPSIS not in full and len(full.splitlines()) == 40


def test_summary_is_fast():
    # A ratio, not an absolute time: the summary must not cost more than torch's own repr.
    big = torch.arange(10**6).view(100, 100, 100)
    for _ in range(2):
        t0 = time.perf_counter()
        render(big)
        ours = time.perf_counter() - t0
        t0 = time.perf_counter()
        repr(big)
        theirs = time.perf_counter() - t0
    assert ours < 5 * theirs + 0.05


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


def test_arange_nd_accepts_ints_or_one_tuple():
    assert arange_nd(2, 3).shape == (2, 3)
    assert arange_nd((2, 3)).shape == (2, 3)
    assert arange_nd(torch.Size([4])).tolist() == [0, 1, 2, 3]
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
def test_horizontal_joins_have_equal_width_lines_before_stripping(shape):
    # Every line of the drawing fits within the widest one, and blocks line up:
    # each grid row has the same number of cells.
    grid = picture_grid(render(arange_nd(*shape), summarize=False))
    assert len({len(row) for row in grid}) == 1


def test_split_pieces_match_torch_split():
    x = arange_nd(2, 3, 2)
    for dim in range(3):
        labels = split_pieces(x.shape, dim)
        for i, piece in enumerate(torch.split(x, 1, dim)):
            mask = torch.from_numpy(labels == chr(ord("a") + i))
            assert sorted(x[mask].tolist()) == sorted(piece.flatten().tolist())
