import torch

from syntaxnmt.cpu.packing import gather_rows, on_rows, packed_rows, scatter_rows


def test_packed_rows_are_the_real_positions_topped_up_with_padding():
    pad = torch.tensor([[False, False, True, True], [False, True, True, True]])
    assert packed_rows(pad, 2).tolist() == [0, 1, 4, 2]  # the 3 real positions, then padding up to 4 rows
    assert packed_rows(pad, 1).tolist() == [0, 1, 4]
    assert packed_rows(pad, 8) is None  # as many rows as positions: nothing to gain


def test_on_rows_computes_the_chosen_rows_and_zeros_elsewhere():
    x = torch.randn(2, 4, 3, requires_grad=True)
    w = torch.randn(3, 5)
    rows = torch.tensor([0, 1, 4])
    y = on_rows(lambda h: h @ w, x, rows)
    assert y.shape == (2, 4, 5)
    full = x @ w
    torch.testing.assert_close(y.view(-1, 5)[rows], full.view(-1, 5)[rows])
    others = torch.ones(8, dtype=torch.bool)
    others[rows] = False
    assert y.view(-1, 5)[others].eq(0).all()
    y.sum().backward()  # the gradient reaches only the chosen rows of the input
    assert x.grad.view(-1, 3)[others].eq(0).all() and x.grad.view(-1, 3)[rows].ne(0).all()
    assert on_rows(lambda h: h @ w, x, None) is not None and torch.equal(gather_rows(x, None), x.reshape(-1, 3))
    torch.testing.assert_close(scatter_rows(gather_rows(x, rows), rows, x).view(-1, 3)[rows], x.view(-1, 3)[rows])


def test_the_left_out_positions_ride_along_and_only_they_are_zeroed():
    """packed_rows keeps the positions it leaves out (``rest``); scatter_rows and the gradient of
    gather_rows zero only those, and both ways give what index_select / zeros + index_copy give."""
    from syntaxnmt.cpu.packing import rest_of

    pad = torch.tensor([[False, False, True, True, True], [False, True, True, True, True]])
    rows = packed_rows(pad, 2)
    assert rows.tolist() == [0, 1, 5, 2] and rows.rest.tolist() == [3, 4, 6, 7, 8, 9]
    assert torch.equal(rest_of(rows.clone(), 10), rows.rest)  # computed when not carried
    x = torch.randn(2, 5, 3, requires_grad=True)
    y = torch.randn(4, 6, requires_grad=True)
    torch.empty(10, 6).fill_(float("nan"))  # a freed block of garbage the scatter may reuse
    placed = scatter_rows(y, rows, x)
    expected = torch.zeros(10, 6).index_copy(0, rows, y.detach()).view(2, 5, 6)
    assert torch.equal(placed, expected)
    g = torch.randn(2, 5, 6)
    placed.backward(g)
    assert torch.equal(y.grad, g.view(10, 6)[rows])
    picked = gather_rows(x, rows)
    assert torch.equal(picked, x.detach().view(10, 3)[rows])
    h = torch.randn(4, 3)
    picked.backward(h)
    assert torch.equal(x.grad.view(10, 3), torch.zeros(10, 3).index_copy(0, rows, h))


def test_placed_rows_place_each_packed_tensor_once_when_read():
    """PlacedRows: the (B, L, E) tensors of Place.placed, made on first reading and kept; negative
    indices, slices and iteration as a list's."""
    from syntaxnmt.cpu.packing import Place, PlacedRows

    pad = torch.tensor([[False, False, True], [False, True, True]])
    rows = packed_rows(pad, 1)
    packed = [torch.randn(3, 4), torch.randn(3, 4)]
    layers = PlacedRows(packed, Place(rows, 2, 3))
    assert len(layers) == 2 and layers._placed == {}
    first = layers[0]
    assert first.shape == (2, 3, 4) and torch.equal(first.view(-1, 4)[rows], packed[0]) and first.view(-1, 4)[[2, 4, 5]].eq(0).all()
    assert layers[0] is first and layers[-2] is first and list(layers)[1] is layers[1]
    assert [x is y for x, y in zip(layers[:], layers)] == [True, True]
    try:
        layers[2]
    except IndexError:
        pass
    else:
        raise AssertionError("index 2 of 2 layers must raise IndexError")
    assert torch.equal(Place(None, 2, 3).placed(torch.arange(12.0).view(6, 2)), torch.arange(12.0).view(2, 3, 2))
