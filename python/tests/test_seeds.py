"""Every example of the seeds (MXNet's KVStore tutorial, its notebook and the Perl API
reference of AI::MXNet::KVStore) written with NumPy against `kvstore`: each prints what the
seed prints (compared with the seed's text) and is checked against an independent float64
reference. The random variants run the same calls on random values (seed printed).

The seeds' "devices" (mx.gpu(i), npx.cpu(i)) are arrays in a list: a list of values for one key
is what several devices push.
"""
import re

import numpy as np
import pytest

import kvstore

SHAPE = (2, 3)


def numbers(text):
    """The numbers of a printed array, in order (any of numpy's or MXNet's layouts)."""
    return [float(x) for x in re.findall(r"-?\d+\.?\d*(?:e[-+]?\d+)?", text)]


def expect_printed(capsys, seed_text, reference):
    """Checks the captured output against the seed's text and a float64 reference."""
    out = capsys.readouterr().out
    with capsys.disabled():  # Shown in the test log beside the seed's text.
        print(f"\n{out}", end="")
    assert numbers(out) == numbers(seed_text), (out, seed_text)
    assert numbers(out) == list(np.asarray(reference, dtype=np.float64).ravel()), out
    return out


# --- 000: the tutorial ---------------------------------------------------------------------

def test_tutorial_session(capsys):
    """The tutorial's session from the top, in order (000_*.txt)."""
    kv = kvstore.create("local")  # create a local kv store.
    shape = (2, 3)
    kv.init(3, np.ones(shape) * 2)
    a = np.zeros(shape)
    kv.pull(3, out=a)
    print(a)
    expect_printed(capsys, "[[ 2. 2. 2.]\n[ 2. 2. 2.]]", np.full(shape, 2.0))

    kv.push(3, np.ones(shape) * 8)
    kv.pull(3, out=a)  # pull out the value
    print(a)
    expect_printed(capsys, "[[ 8. 8. 8.]\n[ 8. 8. 8.]]", np.full(shape, 8.0))

    gpus = range(4)
    b = [np.ones(shape) for _ in gpus]
    kv.push(3, b)
    kv.pull(3, out=a)
    print(a)
    expect_printed(capsys, "[[ 4. 4. 4.]\n[ 4. 4. 4.]]", np.sum(b, axis=0, dtype=np.float64))

    def update(key, input, stored):
        print("update on key: %d" % key)
        stored += input * 2

    kv._set_updater(update)
    kv.pull(3, out=a)
    print(a)
    expect_printed(capsys, "[[ 4. 4. 4.]\n[ 4. 4. 4.]]", np.full(shape, 4.0))

    kv.push(3, np.ones(shape))
    out = capsys.readouterr().out
    assert out == "update on key: 3\n"
    kv.pull(3, out=a)
    print(a)
    expect_printed(capsys, "[[ 6. 6. 6.]\n[ 6. 6. 6.]]", 4.0 + 2 * np.ones(shape))

    b = [np.ones(shape) for _ in gpus]
    kv.pull(3, out=b)
    print(b[1])
    expect_printed(capsys, "[[ 6. 6. 6.]\n[ 6. 6. 6.]]", np.full(shape, 6.0))
    for x in b:
        np.testing.assert_array_equal(x, np.full(shape, 6.0))

    keys = [5, 7, 9]
    kv.init(keys, [np.ones(shape)] * len(keys))
    kv.push(keys, [np.ones(shape)] * len(keys))
    assert capsys.readouterr().out == "update on key: 5\nupdate on key: 7\nupdate on key: 9\n"
    b = [np.zeros(shape)] * len(keys)
    kv.pull(keys, out=b)
    print(b[1])
    expect_printed(capsys, "[[ 3. 3. 3.]\n[ 3. 3. 3.]]", 1.0 + 2 * np.ones(shape))

    b = [[np.ones(shape) for _ in gpus]] * len(keys)
    kv.push(keys, b)
    assert capsys.readouterr().out == "update on key: 5\nupdate on key: 7\nupdate on key: 9\n"
    kv.pull(keys, out=b)
    print(b[1][1])
    expect_printed(capsys, "[[ 11. 11. 11.]\n[ 11. 11. 11.]]", 3.0 + 2 * 4 * np.ones(shape))


def test_tutorial_random(rng):
    """The tutorial's calls on random float32 values, against float64 references."""
    kv = kvstore.create("local")
    w0 = rng.standard_normal(SHAPE).astype(np.float32)
    kv.init(3, w0)
    a = np.zeros(SHAPE, np.float32)
    kv.pull(3, out=a)
    np.testing.assert_array_equal(a, w0)
    devs = [rng.standard_normal(SHAPE).astype(np.float32) for _ in range(4)]
    kv.push(3, devs)
    kv.pull(3, out=a)
    np.testing.assert_allclose(a, np.sum([d.astype(np.float64) for d in devs], axis=0),
                               rtol=1e-6, atol=1e-6)
    stored64 = a.astype(np.float64)
    seen = []

    def update(key, input, stored):
        seen.append(key)
        stored += input * 2

    kv._set_updater(update)
    g = rng.standard_normal(SHAPE).astype(np.float32)
    kv.push(3, g)
    assert seen == [3]
    stored64 += 2 * g.astype(np.float64)
    outs = [np.zeros(SHAPE, np.float32) for _ in range(3)]
    kv.pull(3, out=outs)
    for o in outs:
        np.testing.assert_allclose(o, stored64, rtol=1e-6, atol=1e-6)

    keys = [5, 7, 9]
    inits = [rng.standard_normal(SHAPE).astype(np.float32) for _ in keys]
    kv.init(keys, inits)
    grads = [[rng.standard_normal(SHAPE).astype(np.float32) for _ in range(4)] for _ in keys]
    kv.push(keys, grads)
    outs = [np.zeros(SHAPE, np.float32) for _ in keys]
    kv.pull(keys, out=outs)
    for k, init, g4, o in zip(keys, inits, grads, outs):
        ref = init.astype(np.float64) + 2 * np.sum([x.astype(np.float64) for x in g4], axis=0)
        np.testing.assert_allclose(o, ref, rtol=1e-5, atol=1e-5)


# --- 001: the notebook (printed as numpy prints, compared as text) --------------------------

def test_notebook_session(capsys):
    """The notebook's cells In [2] to In [11] (001_*.txt); outputs compared verbatim."""
    print(np.ones((2, 3)))
    assert capsys.readouterr().out == "[[1. 1. 1.]\n [1. 1. 1.]]\n"

    kv = kvstore.create("local")  # Create a local kv store.
    shape = (2, 3)
    kv.init(3, np.ones(shape) * 2)
    a = np.zeros(shape)
    kv.pull(3, out=a)
    print(a)
    assert capsys.readouterr().out == "[[2. 2. 2.]\n [2. 2. 2.]]\n"

    kv.push(3, np.ones(shape) * 8)
    kv.pull(3, out=a)  # Pull out the value
    print(a)
    assert capsys.readouterr().out == "[[8. 8. 8.]\n [8. 8. 8.]]\n"

    devices = range(4)
    b = [np.ones(shape) for _ in devices]
    kv.push(3, b)
    kv.pull(3, out=a)
    print(a)
    assert capsys.readouterr().out == "[[4. 4. 4.]\n [4. 4. 4.]]\n"

    def update(key, input, stored):
        print(f'update on key: {key}')
        stored += input * 2

    kv._set_updater(update)
    kv.pull(3, out=a)
    print(a)
    assert capsys.readouterr().out == "[[4. 4. 4.]\n [4. 4. 4.]]\n"

    kv.push(3, np.ones(shape))
    kv.pull(3, out=a)
    print(a)
    assert capsys.readouterr().out == "update on key: 3\n[[6. 6. 6.]\n [6. 6. 6.]]\n"

    b = [np.ones(shape) for _ in devices]
    kv.pull(3, out=b)
    print(b[1])
    assert capsys.readouterr().out == "[[6. 6. 6.]\n [6. 6. 6.]]\n"

    keys = [5, 7, 9]
    kv.init(keys, [np.ones(shape)] * len(keys))
    kv.push(keys, [np.ones(shape)] * len(keys))
    b = [np.zeros(shape)] * len(keys)
    kv.pull(keys, out=b)
    print(b[1])
    assert capsys.readouterr().out == (
        "update on key: 5\nupdate on key: 7\nupdate on key: 9\n[[3. 3. 3.]\n [3. 3. 3.]]\n")

    b = [[np.ones(shape) for _ in devices]] * len(keys)
    kv.push(keys, b)
    kv.pull(keys, out=b)
    print(b[1][1])
    assert capsys.readouterr().out == (
        "update on key: 5\nupdate on key: 7\nupdate on key: 9\n"
        "[[11. 11. 11.]\n [11. 11. 11.]]\n")
    np.testing.assert_array_equal(b[1][1], 1.0 + 2 * 1 + 2 * 4 * np.ones(shape))


def test_notebook_help(capsys):
    """In [3]: help(kv) - here help() on the package documents it."""
    help(kvstore)
    out = capsys.readouterr().out
    assert "kvstore" in out and "create" in out and "KVStore" in out


# --- 002: the Perl API reference -------------------------------------------------------------

def test_perl_init_push_updater(capsys):
    """init, push (single, aggregated, lists, several devices) and _set_updater, in order."""
    shape = [2, 3]
    kv = kvstore.create('local')
    kv.init(3, np.ones(shape) * 2)
    a = np.zeros(shape)
    kv.pull(3, out=a)
    print(a)
    expect_printed(capsys, "[[ 2  2  2]\n[ 2  2  2]]", np.full(shape, 2.0))
    keys = [5, 7, 9]
    kv.init(keys, [np.ones(shape) for _ in keys])

    kv.push(3, np.ones(shape) * 8)
    kv.pull(3, out=a)  # pull out the value
    print(a)
    expect_printed(capsys, "[[ 8.  8.  8.]\n[ 8.  8.  8.]]", np.full(shape, 8.0))

    gpus = range(4)
    b = [np.ones(shape) for _ in gpus]
    kv.push(3, b)
    kv.pull(3, out=a)
    print(a)
    expect_printed(capsys, "[[ 4.  4.  4.]\n[ 4.  4.  4.]]", np.full(shape, 4.0))

    kv.push(keys, [np.ones(shape) for _ in keys])
    b = [np.zeros(shape) for _ in keys]
    kv.pull(keys, out=b)
    print(b[1])
    expect_printed(capsys, "[[ 1.  1.  1.]\n[ 1.  1.  1.]]", np.ones(shape))

    b = [[np.ones(shape) for _ in gpus] for _ in keys]
    kv.push(keys, b)
    kv.pull(keys, out=b)
    print(b[1][1])
    expect_printed(capsys, "[[ 4.  4.  4.]\n[ 4.  4.  4.]]", np.full(shape, 4.0))

    def update(key, input, stored):
        print(f"update on key: {key}")
        stored += input * 2

    kv._set_updater(update)
    kv.pull(3, out=a)
    print(a)
    expect_printed(capsys, "[[ 4.  4.  4.]\n[ 4.  4.  4.]]", np.full(shape, 4.0))
    kv.push(3, np.ones(shape))
    assert capsys.readouterr().out == "update on key: 3\n"
    kv.pull(3, out=a)
    print(a)
    expect_printed(capsys, "[[ 6.  6.  6.]\n[ 6.  6.  6.]]", 4.0 + 2 * np.ones(shape))


def test_perl_pull(capsys):
    """pull: one key, several devices, a list of keys on one and on several devices."""
    shape = [2, 3]
    kv = kvstore.create('local')
    keys = [5, 7, 9]
    kv.init([3] + keys, [np.ones(shape) * 2 for _ in range(4)])
    a = np.zeros(shape)
    kv.pull(3, out=a)
    print(a)
    expect_printed(capsys, "[[ 2.  2.  2.]\n[ 2.  2.  2.]]", np.full(shape, 2.0))
    gpus = range(4)
    b = [np.ones(shape) for _ in gpus]
    kv.pull(3, out=b)
    print(b[1])
    expect_printed(capsys, "[[ 2.  2.  2.]\n[ 2.  2.  2.]]", np.full(shape, 2.0))
    b = [np.zeros(shape) for _ in keys]
    kv.pull(keys, out=b)
    print(b[1])
    expect_printed(capsys, "[[ 2.  2.  2.]\n[ 2.  2.  2.]]", np.full(shape, 2.0))
    b = [[np.ones(shape) for _ in gpus] for _ in keys]
    kv.pull(keys, out=b)
    print(b[1][1])
    expect_printed(capsys, "[[ 2.  2.  2.]\n[ 2.  2.  2.]]", np.full(shape, 2.0))
    for per_key in b:
        for x in per_key:
            np.testing.assert_array_equal(x, np.full(shape, 2.0))


def dense_rows(value, row_ids):
    ref = np.zeros_like(value, dtype=np.float64)
    ids = sorted(set(int(i) for i in row_ids))
    ref[ids] = value[ids]
    return ref


def test_perl_row_sparse_pull(capsys):
    """row_sparse_pull with sorted, duplicated and unsorted row ids (string key '3') into a
    row-sparse output, printed dense as the seed's aspdl does."""
    shape = [3, 3]
    kv = kvstore.create('local')
    ones = np.ones(shape)
    kv.init('3', kvstore.RowSparseArray.from_dense(ones))  # ->tostype('row_sparse')
    a = kvstore.RowSparseArray.zeros(shape)  # mx->nd->sparse->zeros('row_sparse', $shape)
    row_ids = np.array([0, 2], dtype=np.int64)
    kv.row_sparse_pull('3', out=a, row_ids=row_ids)
    print(a.asnumpy())
    expect_printed(capsys, "[[ 1.  1.  1.]\n[ 0.  0.  0.]\n[ 1.  1.  1.]]",
                   dense_rows(ones, row_ids))
    duplicate_row_ids = np.array([2, 2], dtype=np.int64)
    kv.row_sparse_pull('3', out=a, row_ids=duplicate_row_ids)
    print(a.asnumpy())
    expect_printed(capsys, "[[ 0.  0.  0.]\n[ 0.  0.  0.]\n[ 1.  1.  1.]]",
                   dense_rows(ones, duplicate_row_ids))
    assert a.indices.tolist() == [2]
    unsorted_row_ids = np.array([1, 0], dtype=np.int64)
    kv.row_sparse_pull('3', out=a, row_ids=unsorted_row_ids)
    print(a.asnumpy())
    expect_printed(capsys, "[[ 1.  1.  1.]\n[ 1.  1.  1.]\n[ 0.  0.  0.]]",
                   dense_rows(ones, unsorted_row_ids))
    assert a.indices.tolist() == [0, 1]


def test_perl_row_sparse_pull_random(rng):
    """row_sparse_pull of random rows of a random value, several outputs, one id list each."""
    kv = kvstore.create('local')
    value = rng.standard_normal((50, 4)).astype(np.float32)
    kv.init('w', value)
    ids = [rng.integers(0, 50, size=12), rng.integers(0, 50, size=3)]
    outs = [kvstore.RowSparseArray.zeros((50, 4)) for _ in ids]
    kv.row_sparse_pull('w', out=outs, row_ids=ids)
    for o, i in zip(outs, ids):
        np.testing.assert_array_equal(o.asnumpy().astype(np.float64),
                                      dense_rows(value.astype(np.float64), i))
        assert o.indices.tolist() == sorted(set(i.tolist()))
    with pytest.raises(ValueError, match="50"):
        kv.row_sparse_pull('w', out=outs[0], row_ids=[3, 50])


def test_perl_set_gradient_compression(rng):
    """{'type': '2bit', 'threshold': 0.5}: each push sends +-threshold or 0, with the residual
    carried to the next push (float64 reference of MXNet's rule)."""
    kv = kvstore.create('local')
    t = 0.5
    kv.set_gradient_compression({'type': '2bit', 'threshold': t})
    n = 37
    kv.init(0, np.zeros(n, np.float32))
    residual = np.zeros(n)
    out = np.zeros(n, np.float32)
    for _ in range(5):
        g = rng.uniform(-1.2, 1.2, n).astype(np.float32)
        residual += g.astype(np.float64)
        sent = np.where(residual >= t, t, np.where(residual <= -t, -t, 0.0))
        residual -= sent
        kv.push(0, g)
        kv.pull(0, out=out)
        np.testing.assert_allclose(out, sent, atol=1e-6)  # ASSIGN: stored = decoded push
    with pytest.raises(ValueError, match="threshold"):
        kv.set_gradient_compression({'type': '2bit', 'threshold': -1})
    with pytest.raises(ValueError):
        kv.set_gradient_compression({'type': '3bit'})


def test_perl_set_optimizer(rng):
    """set_optimizer: SGD with momentum runs in the store's updater (float64 reference)."""
    kv = kvstore.create('local')
    lr, mom_rate, wd = 0.1, 0.9, 0.01
    kv.set_optimizer('sgd', learning_rate=lr, momentum=mom_rate, wd=wd)
    w = rng.standard_normal((4, 5)).astype(np.float32)
    kv.init('w', w)
    w64 = w.astype(np.float64)
    mom = np.zeros_like(w64)
    out = np.zeros_like(w)
    for _ in range(4):
        g = rng.standard_normal(w.shape).astype(np.float32)
        kv.push('w', g)
        mom = mom_rate * mom - lr * (g.astype(np.float64) + wd * w64)
        w64 = w64 + mom
        kv.pull('w', out=out)
        np.testing.assert_allclose(out, w64, rtol=1e-5, atol=1e-6)


def test_perl_type_rank_num_workers():
    kv = kvstore.create('local')
    assert kv.type == 'local'
    assert kv.rank == 0
    assert kv.num_workers == 1


def test_perl_save_load_optimizer_states(rng, tmp_path):
    """save_optimizer_states / load_optimizer_states: a second store that loads the states
    continues exactly as the first (Adam, float64 reference of the continuation)."""
    kv = kvstore.create('local')
    kv.set_optimizer('adam', learning_rate=0.01)
    w = rng.standard_normal(10).astype(np.float32)
    kv.init(1, w)
    for _ in range(3):
        kv.push(1, rng.standard_normal(10).astype(np.float32))
    fname = tmp_path / "states"
    kv.save_optimizer_states(str(fname))
    snapshot = np.zeros(10, np.float32)
    kv.pull(1, out=snapshot)
    g = rng.standard_normal(10).astype(np.float32)
    kv.push(1, g)
    first = np.zeros(10, np.float32)
    kv.pull(1, out=first)

    kv2 = kvstore.create('local')
    kv2.set_optimizer('adam', learning_rate=0.01)
    kv2.init(1, snapshot)
    kv2.load_optimizer_states(fname)
    kv2.push(1, g)
    second = np.zeros(10, np.float32)
    kv2.pull(1, out=second)
    np.testing.assert_array_equal(first, second)
    # Without the states, the step is the first Adam step: |w - snapshot| ~ lr.
    kv3 = kvstore.create('local')
    kv3.set_optimizer('adam', learning_rate=0.01)
    kv3.init(1, snapshot)
    kv3.push(1, g)
    third = np.zeros(10, np.float32)
    kv3.pull(1, out=third)
    np.testing.assert_allclose(np.abs(third.astype(np.float64) - snapshot), 0.01, rtol=1e-3)
    assert not np.array_equal(third, first)
    with pytest.raises(KeyError, match="missing"):
        kv2.load_optimizer_states(tmp_path / "missing")


def test_perl_barrier_and_send_command():
    """_barrier and _send_command_to_servers return at once on an in-process store."""
    kv = kvstore.create('local')
    kv._barrier()
    kv.barrier()
    kv._send_command_to_servers(0, "sgd lr=0.1")
    assert kv.num_dead_node(kvstore.SERVERS, 1) == 0


def test_perl_create():
    assert kvstore.create('local').type == 'local'
    assert kvstore.create('device').type == 'device'
    with pytest.raises(ValueError, match="local"):
        kvstore.create('nonsense')
