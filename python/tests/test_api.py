"""The Python API on in-process stores: errors as Python exceptions, zero copy through DLPack,
dtypes, PyTorch tensors, the asynchronous form, every optimizer, docstrings."""
import gc
import tracemalloc

import numpy as np
import pytest
import torch

import kvstore


def test_errors_are_python_exceptions(rng):
    kv = kvstore.create("local")
    w = rng.standard_normal((2, 3)).astype(np.float32)
    kv.init(3, w)
    out = np.zeros((2, 3), np.float32)
    with pytest.raises(KeyError, match="key 4 was never initialised"):
        kv.pull(4, out=out)
    with pytest.raises(KeyError):
        kv.push(4, w)
    with pytest.raises(kvstore.NotFoundError):
        kv.push(4, w)
    with pytest.raises(ValueError, match=r"key 3.*\(3, 2\).*\(2, 3\)"):
        kv.push(3, np.zeros((3, 2), np.float32))
    with pytest.raises(ValueError, match="int64"):  # Only float dtypes are converted.
        kv.push(3, np.zeros((2, 3), np.int64))
    with pytest.raises(ValueError, match=r"\(2, 2\)"):
        kv.pull(3, out=np.zeros((2, 2), np.float32))
    with pytest.raises(kvstore.AlreadyExistsError):
        kv.init(3, w)
    with pytest.raises(ValueError):  # int and str keys in one store
        kv.init("x", w)
    with pytest.raises(ValueError, match="int or a str"):
        kv.push(1.5, w)
    with pytest.raises(ValueError, match="3 keys"):
        kv.push([3, 3, 3], [w, w])
    with pytest.raises(ValueError, match="uint8|dtype|cannot be read"):
        kv.push(3, np.zeros((2, 3), np.uint8))
    with pytest.raises(kvstore.FailedPreconditionError):
        kv.checkpoint("ckpt")
    with pytest.raises(TypeError):
        kv.pull(3)
    # Nothing changed on any error.
    kv.pull(3, out=out)
    np.testing.assert_array_equal(out, w)


def test_pull_writes_in_place_and_push_reads_in_place(rng):
    """The output's own buffer receives the value; no array is allocated for a 100 MB push or
    pull (tracemalloc sees every NumPy allocation)."""
    kv = kvstore.create("local")
    n = 25 * 1024 * 1024  # 100 MB of float32
    value = rng.standard_normal(n, dtype=np.float32)
    kv.init("big", value)
    out = np.zeros(n, np.float32)
    address = out.ctypes.data
    gc.collect()
    tracemalloc.start()
    kv.push("big", value)
    kv.pull("big", out=out)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert out.ctypes.data == address
    assert peak < 1 << 20, f"{peak} bytes allocated by Python during a 100 MB push and pull"
    np.testing.assert_array_equal(out[:1000], value[:1000])
    np.testing.assert_array_equal(out[-1000:], value[-1000:])


def test_changing_a_pushed_array_after_push_returns(rng):
    kv = kvstore.create("local")
    g = rng.standard_normal(100).astype(np.float32)
    kv.init(0, np.zeros(100, np.float32))
    pushed = g.copy()
    kv.push(0, g)
    g[:] = 123.0  # after push returned
    out = np.zeros(100, np.float32)
    kv.pull(0, out=out)
    np.testing.assert_array_equal(out, pushed)


def test_torch_tensors_and_views(rng):
    kv = kvstore.create("local")
    w = torch.from_numpy(rng.standard_normal((4, 5)).astype(np.float32))
    kv.init("w", w)
    grad = torch.randn(4, 5, requires_grad=True)  # exported through detach()
    kv.push("w", [grad, grad])
    out = torch.zeros(4, 5)
    kv.pull("w", out=out)
    np.testing.assert_allclose(out.numpy(), 2 * grad.detach().numpy().astype(np.float64),
                               rtol=1e-6)
    # A strided value is copied once; a strided output is refused.
    kv.push("w", torch.zeros(5, 4).t())
    kv.pull("w", out=out)
    assert float(out.abs().sum()) == 0.0
    with pytest.raises(ValueError, match="contiguous|compact|strides"):
        kv.pull("w", out=torch.zeros(5, 4).t())


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int32", "int64"])
def test_dtypes(rng, dtype):
    kv = kvstore.create("local")
    a = (rng.standard_normal((3, 7)) * 10).astype(dtype)
    b = (rng.standard_normal((3, 7)) * 10).astype(dtype)
    kv.init(1, np.zeros((3, 7), dtype))
    kv.push(1, [a, b])
    out = np.zeros((3, 7), dtype)
    kv.pull(1, out=out)
    ref = a.astype(np.float64) + b.astype(np.float64)
    tol = 1e-2 if dtype == "float16" else 1e-6
    np.testing.assert_allclose(out.astype(np.float64), ref, rtol=tol, atol=tol)


def test_bfloat16_updater_gets_torch_tensors(rng):
    kv = kvstore.create("local")
    kv.init(0, torch.zeros(8, dtype=torch.bfloat16))
    seen = []

    def update(key, received, stored):
        seen.append((type(received), received.dtype))
        stored.copy_(received * 3)

    kv.set_updater(update)
    g = torch.tensor(rng.integers(-8, 8, 8), dtype=torch.bfloat16)
    kv.push(0, g)
    out = torch.zeros(8, dtype=torch.bfloat16)
    kv.pull(0, out=out)
    assert seen == [(torch.Tensor, torch.bfloat16)]
    np.testing.assert_array_equal(out.float().numpy(), 3 * g.float().numpy())


def test_updater_exception_is_raised_by_push():
    kv = kvstore.create("local")
    kv.init(0, np.zeros(3))

    def update(key, received, stored):
        raise ZeroDivisionError(f"bad key {key}")

    kv.set_updater(update)
    with pytest.raises(ZeroDivisionError, match="bad key 0"):
        kv.push(0, np.ones(3))


def test_pushpull_and_asynchronous_form(rng):
    kv = kvstore.create("local")
    kv.init([1, 2], [np.zeros(5), np.zeros(5)])
    g = rng.standard_normal(5)
    kv.pushpull(1, g)  # out=None: in place
    out = np.zeros(5)
    kv.pushpull(2, g * 2, out=out)
    np.testing.assert_array_equal(out, g * 2)
    h = rng.standard_normal(5)
    kv.push([1, 2], [h, h], block=False)
    kv.pull([1, 2], out=[out, g], block=False)
    kv.wait([1, 2])
    kv.wait_all()
    np.testing.assert_array_equal(out, h)
    np.testing.assert_array_equal(g, h)


def test_every_optimizer_with_keyword_hyper_parameters(rng):
    """Every optimizer of common/optimizer_config.h takes keyword hyper-parameters and moves
    the weight; unknown names and parameters are ValueErrors."""
    names = kvstore.optimizer_names()
    assert set(names) >= {"sgd", "nag", "adam", "adamw", "adagrad", "rmsprop", "adadelta",
                          "adamax", "nadam", "ftrl", "signum", "lamb", "lars", "test"}
    extra = {"sgd": dict(momentum=0.9), "nag": dict(momentum=0.8),
             "adam": dict(beta1=0.8, beta2=0.99, epsilon=1e-7),
             "adamw": dict(beta1=0.8, bias_correction=False), "adagrad": dict(epsilon=1e-5),
             "rmsprop": dict(rho=0.8, centered=True, momentum=0.5, clip_weights=10.0),
             "adadelta": dict(rho=0.8), "adamax": dict(beta1=0.8), "nadam":
             dict(schedule_decay=0.01), "ftrl": dict(lamda1=0.001, beta=0.5),
             "signum": dict(momentum=0.8, wd_lh=0.01),
             "lamb": dict(lower_bound=0.1, upper_bound=10.0), "lars": dict(eta=0.01)}
    for name in names:
        kv = kvstore.create("local")
        kv.set_optimizer(name, learning_rate=0.05, rescale_grad=0.5, clip_gradient=5.0,
                         lr_scheduler={"type": "factor", "step": 2, "factor": 0.5},
                         **extra.get(name, {}))
        w = rng.standard_normal(6).astype(np.float32)
        kv.init(0, w)
        kv.push(0, rng.standard_normal(6).astype(np.float32))
        out = np.zeros(6, np.float32)
        kv.pull(0, out=out)
        assert np.all(np.isfinite(out)), name
        assert not np.array_equal(out, w), name
    kv = kvstore.create("local")
    with pytest.raises(ValueError, match="nosuch"):
        kv.set_optimizer("nosuch")
    with pytest.raises(ValueError, match="momentum"):
        kv.set_optimizer("adam", momentum=0.9)
    with pytest.raises(ValueError, match="bogus"):
        kv.set_optimizer("sgd", bogus=1)
    kv.set_optimizer({"name": "sgd", "learning_rate": 0.5})
    kv.init(0, np.ones(2, np.float32))
    kv.push(0, np.ones(2, np.float32))
    out = np.zeros(2, np.float32)
    kv.pull(0, out=out)
    np.testing.assert_allclose(out, 0.5)


def test_optimizer_keys_multipliers_and_kept_state(rng):
    """key_prefix, lr_mult/wd_mult and keep_state through the package, in a local store,
    against float64 values computed here (torch_sgd: buf = m*buf + g; w -= lr*buf)."""
    kv = kvstore.create("local")
    kv.set_optimizer("torch_sgd", learning_rate=1.0, momentum=0.5, key_prefix="opt/",
                     lr_mult={"opt/b": 0.1}, wd_mult={"opt/b": 0.0}, wd=0.01)
    w = {k: rng.standard_normal(4) for k in ("opt/a", "opt/b", "other")}
    kv.init(list(w), [v.copy() for v in w.values()])
    buf = {k: np.zeros(4) for k in w}
    lr = {"opt/a": 1.0, "opt/b": 0.1}
    wd = {"opt/a": 0.01, "opt/b": 0.0}
    for step in range(4):
        if step == 2:  # A learning-rate change keeping the momentum.
            kv.set_optimizer("torch_sgd", learning_rate=0.5, momentum=0.5, key_prefix="opt/",
                             lr_mult={"opt/b": 0.1}, wd_mult={"opt/b": 0.0}, wd=0.01,
                             keep_state=True)
            lr = {k: v * 0.5 for k, v in lr.items()}
        grads = {k: rng.standard_normal(4) for k in w}
        kv.push(list(grads), list(grads.values()))
        for k in ("opt/a", "opt/b"):
            buf[k] = 0.5 * buf[k] + grads[k] + wd[k] * w[k]
            w[k] = w[k] - lr[k] * buf[k]
        w["other"] = grads["other"]  # Outside the prefix: stored as received.
        for k, expected in w.items():
            out = np.zeros(4)
            kv.pull(k, out=out)
            np.testing.assert_allclose(out, expected, rtol=1e-12, atol=1e-12, err_msg=k)
    with pytest.raises(kvstore.FailedPreconditionError, match='"torch_sgd".*"adam"'):
        kv.set_optimizer("adam", keep_state=True)


def test_docstrings_and_type_hints():
    import inspect
    import typing
    for name in ["init", "push", "pull", "pushpull", "broadcast", "row_sparse_pull",
                 "set_optimizer", "set_gradient_compression", "set_updater", "barrier",
                 "save_optimizer_states", "load_optimizer_states", "send_command_to_servers",
                 "num_dead_node",
                 "checkpoint", "wait", "wait_all"]:
        method = getattr(kvstore.KVStore, name)
        assert method.__doc__ and len(method.__doc__) > 80, name
        hints = typing.get_type_hints(method)
        assert "return" in hints, name
    assert "block" in kvstore.KVStore.push.__doc__
    assert "KeyError" in kvstore.KVStore.push.__doc__
    assert inspect.signature(kvstore.create).parameters["name"].default == "local"


def test_store_goes_with_its_updater_and_pending_values(rng):
    """Dropping a store releases its Python updater and the arrays of unwaited operations
    (with the GIL handled on the way); the arrays stay valid for their owners."""
    import sys
    import weakref

    class Updater:
        def __call__(self, key, received, stored):
            stored += received

    updater = Updater()
    ref = weakref.ref(updater)
    kv = kvstore.create("local")
    kv.set_updater(updater)
    g = rng.standard_normal(16)
    kv.init(0, np.zeros(16))
    before = sys.getrefcount(g)
    kv.push(0, g, block=False)
    del updater, kv
    gc.collect()
    assert ref() is None
    assert sys.getrefcount(g) == before
    np.testing.assert_array_equal(g + 0, g)


def test_close_ends_the_store(rng):
    kv = kvstore.create("local")
    kv.init(0, rng.standard_normal(4).astype(np.float32))
    kv.close()
    with pytest.raises(kvstore.FailedPreconditionError, match="closed"):
        kv.pull(0, out=np.zeros(4, np.float32))
    with pytest.raises(kvstore.FailedPreconditionError, match="closed"):
        _ = kv.rank
