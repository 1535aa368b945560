"""The call forms and rules of MXNet's ``mx.kv`` beyond the seeds' examples (docs/python.md,
"MXNet's forms"): row ids in every form row_sparse_pull takes, broadcast and pushpull with
several outputs, dtype conversion, RowSparseArray values, and optimizer hyper-parameters MXNet
allows. Values are random (seed printed by the rng fixture); references are float64 NumPy.
"""
import numpy as np
import pytest
import torch

import kvstore
from kvstore import RowSparseArray


def rows_of(value, ids):
    """float64 reference of a row_sparse_pull: the rows `ids` of `value`, zeros elsewhere."""
    ref = np.zeros(value.shape)
    unique = sorted(set(int(i) for i in np.asarray(ids).ravel()))
    ref[unique] = np.asarray(value, np.float64)[unique]
    return ref, unique


def check_rows(out, value, ids):
    ref, unique = rows_of(value, ids)
    assert isinstance(out, RowSparseArray)
    assert out.indices.tolist() == unique
    np.testing.assert_allclose(np.asarray(out.asnumpy(), np.float64), ref, rtol=1e-6, atol=1e-6)


def stored(kv, key, shape):
    out = np.zeros(shape, np.float32)
    kv.pull(key, out=out)
    return out


# --- 1. row_sparse_pull takes row ids in every form MXNet does ---------------------------------

def test_row_ids_of_any_shape_are_flattened(rng):
    kv = kvstore.create("local")
    value = rng.standard_normal((40, 3)).astype(np.float32)
    kv.init("w", value)
    for shape in [(12,), (3, 4), (2, 2, 3), ()]:
        ids = rng.integers(0, 40, size=shape)
        out = RowSparseArray.zeros((40, 3))
        kv.row_sparse_pull("w", out=out, row_ids=ids)
        check_rows(out, value, ids)
    # MXNet's default NDArray dtype is float32: integral float ids are ids; PyTorch ids too.
    ids = rng.integers(0, 40, size=(2, 5))
    for form in [ids.astype(np.float32), torch.tensor(ids), ids.tolist()[0], int(ids[0, 0])]:
        out = RowSparseArray.zeros((40, 3))
        kv.row_sparse_pull("w", out=out, row_ids=form)
        check_rows(out, value, np.asarray(form if not isinstance(form, torch.Tensor)
                                          else form.numpy()))


def test_row_ids_one_per_output_and_one_for_all(rng):
    kv = kvstore.create("local")
    value = rng.standard_normal((30, 2)).astype(np.float32)
    kv.init(7, value)
    ids = [rng.integers(0, 30, size=rng.integers(1, 9)) for _ in range(3)]
    outs = [RowSparseArray.zeros((30, 2)) for _ in ids]
    kv.row_sparse_pull(7, out=outs, row_ids=ids)  # a list of arrays, one per output device
    for o, i in zip(outs, ids):
        check_rows(o, value, i)
    # One id array for every output: pulled once, each output gets its own copy.
    outs = [RowSparseArray.zeros((30, 2)) for _ in range(3)]
    kv.row_sparse_pull(7, out=outs, row_ids=ids[0])
    for o in outs:
        check_rows(o, value, ids[0])
    outs[0].data[...] = 99
    check_rows(outs[1], value, ids[0])
    kv.row_sparse_pull(7, out=outs, row_ids=[ids[1]])  # a list of one array: the same
    for o in outs:
        check_rows(o, value, ids[1])


def test_row_ids_for_a_list_of_keys(rng):
    kv = kvstore.create("local")
    a = rng.standard_normal((20, 4)).astype(np.float32)
    b = rng.standard_normal((9, 3)).astype(np.float32)
    kv.init(["a", "b"], [a, b])
    ia = [rng.integers(0, 20, size=(2, 3)), rng.integers(0, 20, size=4)]
    ib = rng.integers(0, 9, size=5)
    outs = [[RowSparseArray.zeros((20, 4)), RowSparseArray.zeros((20, 4))],
            RowSparseArray.zeros((9, 3))]
    kv.row_sparse_pull(["a", "b"], out=outs, row_ids=[ia, ib])  # a list of such lists
    check_rows(outs[0][0], a, ia[0])
    check_rows(outs[0][1], a, ia[1])
    check_rows(outs[1], b, ib)
    # One id array for every output of every key.
    outs = [RowSparseArray.zeros((20, 4)), RowSparseArray.zeros((9, 3))]
    kv.row_sparse_pull(["a", "b"], out=outs, row_ids=np.array([0, 8, 3]))
    check_rows(outs[0], a, [0, 8, 3])
    check_rows(outs[1], b, [0, 8, 3])


def test_wrong_row_id_forms_raise_the_packages_error_naming_key_and_form(rng):
    kv = kvstore.create("local")
    value = rng.standard_normal((10, 2)).astype(np.float32)
    kv.init("w", value)
    kv.init("v", value)
    out = RowSparseArray.zeros((10, 2))
    kv.row_sparse_pull("w", out=out, row_ids=[1, 2])
    before = out.asnumpy().copy()
    cases = [
        ("w", out, "abc", "str"),
        ("w", out, {1: 2}, "dict"),
        ("w", out, [[1, 2], [3]], "1 outputs but 2"),
        ("w", out, np.array([0.5, 1.0]), "not integers"),
        ("w", out, np.array([True, False]), "bool"),
        ("w", out, [1, "x"], "list"),
        ("w", out, [np.array([1]), None], "NoneType"),
        (["w", "v"], [out, RowSparseArray.zeros((10, 2))], [[1]], "2 keys"),
    ]
    for key, o, ids, named in cases:
        with pytest.raises(kvstore.InvalidArgumentError) as error:
            kv.row_sparse_pull(key, out=o, row_ids=ids)
        message = str(error.value)
        assert isinstance(error.value, ValueError) and not isinstance(error.value, TypeError)
        assert named in message, message
        assert "'w'" in message or "['w', 'v']" in message, message
    np.testing.assert_array_equal(out.asnumpy(), before)


# --- 2. broadcast and pushpull with several outputs ------------------------------------------

def test_broadcast_initialises_and_pulls_into_every_output(rng):
    kv = kvstore.create("local")
    v = rng.standard_normal((4, 5)).astype(np.float32)
    outs = [np.zeros((4, 5), np.float32) for _ in range(3)]
    kv.broadcast(3, v, out=outs)
    for o in outs:
        np.testing.assert_array_equal(o, v)
    # A list of keys with nested outputs.
    a, b = rng.standard_normal(6).astype(np.float32), rng.standard_normal((2, 2)).astype(np.float32)
    oa, ob = [np.zeros(6, np.float32), np.zeros(6, np.float32)], np.zeros((2, 2), np.float32)
    kv.broadcast([4, 5], [a, b], out=[oa, ob])
    for o in oa:
        np.testing.assert_array_equal(o, a)
    np.testing.assert_array_equal(ob, b)
    # Without out, into the value itself; a value given as a list of one array.
    mine = np.zeros(3, np.float32)
    kv.broadcast(7, mine)
    np.testing.assert_array_equal(mine, 0)
    o7 = np.ones(3, np.float32)
    kv.broadcast(8, [v[0, :3]], out=o7)
    np.testing.assert_array_equal(o7, v[0, :3])
    with pytest.raises(kvstore.AlreadyExistsError):  # MXNet: a key is broadcast once
        kv.broadcast(3, v, out=outs[0])
    with pytest.raises(ValueError, match="one value per key"):
        kv.broadcast(6, [v, v], out=outs[0])


def test_pushpull_with_more_outputs_than_values(rng):
    kv = kvstore.create("local")
    kv.init(1, np.zeros((3, 3), np.float32))
    values = [rng.standard_normal((3, 3)).astype(np.float32) for _ in range(2)]
    outs = [np.zeros((3, 3), np.float32) for _ in range(4)]
    kv.pushpull(1, values, out=outs)  # two devices push, four outputs receive the result
    ref = values[0].astype(np.float64) + values[1]
    for o in outs:
        np.testing.assert_allclose(o, ref, rtol=1e-6)
    # A list of keys, each with its own number of values and outputs.
    kv.init(2, np.zeros(5, np.float32))
    v2 = rng.standard_normal(5).astype(np.float32)
    o1, o2 = np.zeros((3, 3), np.float32), [np.zeros(5, np.float32), np.zeros(5, np.float32)]
    kv.pushpull([1, 2], [values, v2], out=[o1, o2])
    np.testing.assert_allclose(o1, ref, rtol=1e-6)
    for o in o2:
        np.testing.assert_allclose(o, v2)


# --- 3. dtype conversion ----------------------------------------------------------------------

def test_pull_converts_into_an_output_of_another_float_dtype(rng):
    """MXNet's multi-precision tests pull a float16 key into float32 outputs."""
    kv = kvstore.create("local")
    v = rng.standard_normal((6, 7)).astype(np.float16)
    kv.init("h", v)
    out32 = np.zeros((6, 7), np.float32)
    out64 = torch.zeros((6, 7), dtype=torch.float64)
    kv.pull("h", out=[out32, out64])
    np.testing.assert_array_equal(out32.astype(np.float64), v.astype(np.float64))
    np.testing.assert_array_equal(out64.numpy(), v.astype(np.float64))
    # block=False: the output holds the value after wait.
    late = np.zeros((6, 7), np.float64)
    kv.pull("h", out=late, block=False)
    kv.wait("h")
    np.testing.assert_array_equal(late, v.astype(np.float64))
    late = np.zeros((6, 7), np.float32)
    kv.pull("h", out=late, block=False)
    kv.wait_all()
    np.testing.assert_array_equal(late, v.astype(np.float32))
    # A bfloat16 key into a NumPy float32 output (through PyTorch, which has bfloat16).
    bv = torch.tensor(rng.standard_normal(9), dtype=torch.bfloat16)
    kv.init("bf", bv)
    o = np.zeros(9, np.float32)
    kv.pull("bf", out=o)
    np.testing.assert_array_equal(o, bv.float().numpy())
    # A failed pull writes nothing, converted or not.
    wrong = np.full((6, 6), 5.0, np.float32)
    with pytest.raises(ValueError, match=r"\(6, 6\)"):
        kv.pull("h", out=wrong)
    assert (wrong == 5.0).all()


def test_push_converts_a_value_of_another_float_dtype_to_the_keys(rng):
    kv = kvstore.create("local")
    kv.init(0, np.zeros(50, np.float32))
    v64 = rng.standard_normal(50)
    kv.push(0, v64)
    np.testing.assert_array_equal(stored(kv, 0, 50), v64.astype(np.float32))
    # Several devices in several dtypes: each converted, then summed in the key's dtype.
    parts = [rng.standard_normal(50).astype(np.float16), rng.standard_normal(50),
             torch.tensor(rng.standard_normal(50), dtype=torch.bfloat16)]
    kv.push(0, parts)
    ref = (parts[0].astype(np.float64) + parts[1].astype(np.float32).astype(np.float64) +
           parts[2].double().numpy())
    np.testing.assert_allclose(stored(kv, 0, 50), ref, rtol=1e-5, atol=1e-5)
    # pushpull in place: a float64 array pushed to and pulled from a float32 key.
    kv.init(1, np.zeros(8, np.float32))
    kv.set_optimizer("sgd", learning_rate=0.5)
    g = rng.standard_normal(8)
    sent = g.astype(np.float32).astype(np.float64)
    kv.pushpull(1, g)  # out=None: the result is written into g itself
    np.testing.assert_allclose(g, -0.5 * sent, rtol=1e-6)
    with pytest.raises(ValueError, match="int64"):
        kv.push(0, np.zeros(50, np.int64))


# --- 4. RowSparseArray ------------------------------------------------------------------------

def test_row_sparse_array_construction_and_conversions(rng):
    data = rng.standard_normal((3, 4))
    ids = [5, 0, 5]
    rsp = RowSparseArray(data, ids, (7, 4))
    ref = np.zeros((7, 4))
    np.add.at(ref, ids, data)  # a repeated id stands for the sum of its rows
    np.testing.assert_allclose(rsp.todense(), ref)
    assert rsp.tostype("row_sparse") is rsp and rsp.stype == "row_sparse"
    for bad, named in [((data, [0, 7, 1], (7, 4)), "row id 7"),
                       ((data, [0, 1], (7, 4)), "want (2, 4)"),
                       ((data, [0, 1, 2], ()), "rank >= 1")]:
        with pytest.raises(ValueError, match=named.replace("(", r"\(").replace(")", r"\)")):
            RowSparseArray(*bad)
    dense = np.zeros((6, 3))
    dense[[1, 4]] = rng.standard_normal((2, 3))
    r = RowSparseArray.from_dense(dense)
    assert r.indices.tolist() == [1, 4]
    np.testing.assert_array_equal(r.todense(), dense)
    # torch.sparse_coo_tensor: one sparse dimension (rows) and two (entries).
    rows = torch.tensor(rng.standard_normal((2, 3)))
    t = torch.sparse_coo_tensor(torch.tensor([[4, 1]]), rows, (6, 3))
    r = RowSparseArray.from_torch(t)
    np.testing.assert_allclose(np.asarray(r.todense()), t.to_dense().numpy())
    entries = torch.sparse_coo_tensor(torch.tensor([[0, 3, 3, 0], [1, 2, 0, 1]]),
                                      torch.tensor(rng.standard_normal(4)), (5, 3))
    r = RowSparseArray.from_torch(entries)
    assert r.indices.tolist() == [0, 3]
    np.testing.assert_allclose(np.asarray(r.todense()), entries.to_dense().numpy())


def test_row_sparse_array_from_scipy(rng):
    sparse = pytest.importorskip("scipy.sparse")
    dense = np.zeros((8, 5))
    dense[[2, 6]] = rng.standard_normal((2, 5))
    r = RowSparseArray.from_scipy(sparse.csr_matrix(dense))
    assert r.indices.tolist() == [2, 6]
    np.testing.assert_array_equal(r.todense(), dense)
    kv = kvstore.create("local")
    kv.init(0, np.zeros((8, 5)))
    kv.push(0, sparse.csr_matrix(dense))  # taken as its rows
    out = np.zeros((8, 5))
    kv.pull(0, out=out)
    np.testing.assert_array_equal(out, dense)


def test_row_sparse_values_in_init_push_and_pull(rng):
    kv = kvstore.create("local")
    shape = (12, 3)
    init = RowSparseArray(rng.standard_normal((2, 3)).astype(np.float32), [1, 9], shape)
    kv.init("e", init)
    np.testing.assert_array_equal(stored(kv, "e", shape), init.todense())
    # Two devices push rows; MXNet's ASSIGN stores their row-wise sum (other rows zero).
    g1 = RowSparseArray(rng.standard_normal((2, 3)).astype(np.float32), [3, 9], shape)
    g2 = RowSparseArray(rng.standard_normal((1, 3)).astype(np.float32), [3], shape)
    kv.push("e", [g1, g2])
    ref = g1.todense().astype(np.float64) + g2.todense()
    np.testing.assert_allclose(stored(kv, "e", shape), ref, rtol=1e-6)
    # With an updater that adds, only the listed rows change.
    kv.set_updater(lambda key, received, value: value.__iadd__(received))
    t = torch.sparse_coo_tensor(torch.tensor([[0]]), torch.ones((1, 3)), shape)
    kv.push("e", t)  # a torch sparse tensor is taken as its rows
    ref[0] += 1
    np.testing.assert_allclose(stored(kv, "e", shape), ref, rtol=1e-6)
    # row_sparse_pull into a float64 RowSparseArray converts the rows.
    out = RowSparseArray.zeros(shape, dtype="float64")
    kv.row_sparse_pull("e", out=out, row_ids=[9, 0, 9])
    assert out.dtype == np.float64
    check_rows(out, ref, [9, 0])


def test_mxnet_storage_rules(rng):
    kv = kvstore.create("local")
    value = rng.standard_normal((5, 2)).astype(np.float32)
    kv.init(0, value)
    rsp_out = RowSparseArray.zeros((5, 2))
    with pytest.raises(ValueError, match="use row_sparse_pull"):
        kv.pull(0, out=rsp_out)
    with pytest.raises(ValueError, match="use row_sparse_pull"):
        kv.pushpull(0, value, out=rsp_out)
    dense_out = np.full((5, 2), 3.0, np.float32)
    with pytest.raises(ValueError, match="use pull"):
        kv.row_sparse_pull(0, out=dense_out, row_ids=[1])
    with pytest.raises(ValueError, match=r"\(6, 2\).*\(5, 2\)"):
        kv.row_sparse_pull(0, out=RowSparseArray.zeros((6, 2)), row_ids=[1])
    with pytest.raises(ValueError, match="mix dense and row-sparse"):
        kv.push(0, [value, RowSparseArray.from_dense(value)])
    assert (dense_out == 3.0).all() and len(rsp_out.indices) == 0
    np.testing.assert_array_equal(stored(kv, 0, (5, 2)), value)


# --- 5. optimizer hyper-parameters as MXNet allows them --------------------------------------

def test_negative_learning_rate_is_legal_and_adds(rng):
    """MXNet's own tests use sgd with learning_rate=-1 to add pushes to the stored value."""
    kv = kvstore.create("local")
    w = rng.standard_normal(10).astype(np.float32)
    kv.init(0, w)
    kv.set_optimizer("sgd", learning_rate=-1)
    g = rng.standard_normal(10).astype(np.float32)
    kv.push(0, g)
    np.testing.assert_allclose(stored(kv, 0, 10), w.astype(np.float64) + g, rtol=1e-6,
                               atol=1e-6)
    kv.set_optimizer("sgd", learning_rate=0.1, momentum=1.0)  # legal in MXNet too


@pytest.mark.parametrize("name,hyper,named", [
    ("sgd", {"learning_rate": float("nan")}, "learning_rate"),
    ("sgd", {"momentum": float("inf")}, "momentum"),
    ("adam", {"beta1": 1.0}, "beta1"),
    ("adam", {"wd": float("-inf")}, "wd"),
])
def test_hyper_parameters_that_cannot_give_a_number_are_refused(name, hyper, named):
    kv = kvstore.create("local")
    with pytest.raises(ValueError, match=named):
        kv.set_optimizer(name, **hyper)
