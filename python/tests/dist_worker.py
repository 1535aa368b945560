"""A worker of a local job (deploy/launch.py) for test_dist.py: every check runs in both workers,
which derive both workers' random values from the shared seed KV_TEST_SEED and compare what
they pull with float64 references of the sum over workers.

Usage: dist_worker.py sync|async|interrupt CHECKPOINT_DIR
"""
import os
import signal
import sys
import threading
import time

import numpy as np

import kvstore


def check_close(name, got, ref, tol=1e-5):
    np.testing.assert_allclose(np.asarray(got, np.float64), ref, rtol=tol, atol=tol, err_msg=name)
    print(f"ok {name}", flush=True)


def per_worker(seed, num_workers, shape, tag):
    """Each worker's random float32 value for `tag`, the same in every worker."""
    return [np.random.default_rng([seed, tag, r]).standard_normal(shape).astype(np.float32)
            for r in range(num_workers)]


def quantize_2bit(g, t):
    r = g.astype(np.float64)
    return np.where(r >= t, t, np.where(r <= -t, -t, 0.0))


def sync_job(kv, seed, ckpt_dir):
    n, rank = kv.num_workers, kv.rank
    assert kv.type == "dist_sync"
    assert n == 2 and rank in (0, 1), (n, rank)
    print(f"rank {rank} of {n}", flush=True)

    # init: rank 0's value is stored.
    w0 = per_worker(seed, n, (3, 4), 1)
    kv.init(0, w0[rank])
    out = np.zeros((3, 4), np.float32)
    kv.pull(0, out=out)
    check_close("init stores rank 0's value", out, w0[0].astype(np.float64))

    # push: the server assigns the sum over workers; the array may change once push returns.
    g = per_worker(seed, n, (3, 4), 2)
    mine = g[rank].copy()
    kv.push(0, mine)
    mine[:] = 1e6
    kv.pull(0, out=out)
    check_close("push sums the workers", out, sum(x.astype(np.float64) for x in g))

    # several devices per worker, a list of keys, string-free int keys.
    devs = [per_worker(seed, n, (5,), 10 + d) for d in range(3)]
    kv.init([1, 2], [np.zeros(5, np.float32), np.zeros(5, np.float32)])
    kv.push([1, 2], [[devs[d][rank] for d in range(3)], devs[0][rank]])
    outs = [np.zeros(5, np.float32), np.zeros(5, np.float32)]
    kv.pull([1, 2], out=outs)
    check_close("devices and workers summed",
                outs[0], sum(devs[d][r].astype(np.float64) for d in range(3) for r in range(n)))
    check_close("list of keys", outs[1], sum(devs[0][r].astype(np.float64) for r in range(n)))

    # a value split over both servers (more than 1e6 elements), pushed without a copy.
    big = per_worker(seed, n, (1_500_000,), 3)
    kv.init(3, np.zeros(1_500_000, np.float32))
    kv.push(3, big[rank])
    big_out = np.zeros(1_500_000, np.float32)
    kv.pull(3, out=big_out)
    check_close("big value over two servers", big_out, big[0].astype(np.float64) + big[1])

    # pushpull in place, asynchronous push and pull with wait.
    p = per_worker(seed, n, (7,), 4)
    kv.init(4, np.zeros(7, np.float32))
    mine = p[rank].copy()
    kv.pushpull(4, mine)
    check_close("pushpull", mine, p[0].astype(np.float64) + p[1])
    q = per_worker(seed, n, (7,), 5)
    qmine = q[rank].copy()
    kv.push(4, qmine, block=False)
    qout = np.zeros(7, np.float32)
    kv.pull(4, out=qout, block=False)
    kv.wait(4)
    check_close("block=False then wait", qout, q[0].astype(np.float64) + q[1])

    # row_sparse_pull of some rows of a (20, 3) value.
    r = per_worker(seed, n, (20, 3), 6)
    kv.init(5, r[rank])
    rows = np.array([7, 1, 7, 19])
    rout = kvstore.RowSparseArray.zeros((20, 3))
    kv.row_sparse_pull(5, out=rout, row_ids=rows)
    ref = np.zeros((20, 3))
    ref[[1, 7, 19]] = r[0][[1, 7, 19]]
    check_close("row_sparse_pull", rout.asnumpy(), ref)

    # broadcast: every worker's outputs receive rank 0's value (MXNet 1.6's broadcast).
    b = per_worker(seed, n, (5,), 10)
    bouts = [np.zeros(5, np.float32), np.zeros(5, np.float64)]
    kv.broadcast(8, b[rank], out=bouts)
    for o in bouts:
        check_close("broadcast of rank 0's value", o, b[0])
    mine = b[rank].copy()
    kv.broadcast(10, mine)  # no out: into the value itself
    check_close("broadcast in place", mine, b[0])
    # another float dtype is converted: float64 pushes into the float32 key, float16 output.
    kv.push(8, b[rank].astype(np.float64) * 2)
    hout = np.zeros(5, np.float16)
    kv.pull(8, out=hout)
    check_close("float64 pushes, float16 output", hout, 2 * (b[0].astype(np.float64) + b[1]),
                tol=2e-3 * (1 + np.abs(2 * (b[0] + b[1])).max()))

    # a row-sparse push carries its rows; ASSIGN stores the sum of the workers' rows.
    kv.init(9, np.zeros((20, 3), np.float32))
    g = per_worker(seed, n, (2, 3), 11)
    mine = kvstore.RowSparseArray(g[rank], [3 + rank, 17], (20, 3))
    kv.push(9, mine)
    dense = np.zeros((20, 3), np.float32)
    kv.pull(9, out=dense)
    ref = np.zeros((20, 3))
    for r in range(n):
        np.add.at(ref, [3 + r, 17], g[r].astype(np.float64))
    check_close("row-sparse push summed over workers", dense, ref)

    # 2-bit gradient compression: each worker's push is quantised, the server sums the codes.
    kv.set_gradient_compression({"type": "2bit", "threshold": 0.5})
    c = per_worker(seed, n, (33,), 7)
    kv.init(6, np.zeros(33, np.float32))
    kv.push(6, c[rank])
    cout = np.zeros(33, np.float32)
    kv.pull(6, out=cout)
    check_close("2bit compression", cout, quantize_2bit(c[0], 0.5) + quantize_2bit(c[1], 0.5))
    kv.set_gradient_compression({"type": "none"})

    # errors as Python exceptions.
    try:
        kv.pull(99, out=out)
        raise AssertionError("pull of an unknown key did not raise")
    except KeyError as e:
        print(f"ok KeyError: {e}", flush=True)
    try:
        kv.push(0, np.zeros((4, 3), np.float32))
        raise AssertionError("push of a wrong shape did not raise")
    except ValueError as e:
        print(f"ok ValueError: {e}", flush=True)

    # the optimizer on the servers: SGD with momentum, float64 reference.
    kv.barrier()
    lr, mom_rate = 0.1, 0.9
    kv.set_optimizer("sgd", learning_rate=lr, momentum=mom_rate)
    w = per_worker(seed, n, (6,), 8)[0]
    kv.init(7, w)
    w64, mom = w.astype(np.float64), np.zeros(6)
    wout = np.zeros(6, np.float32)
    for step in range(3):
        gs = per_worker(seed, n, (6,), 100 + step)
        kv.push(7, gs[rank])
        mom = mom_rate * mom - lr * sum(x.astype(np.float64) for x in gs)
        w64 = w64 + mom
        kv.pull(7, out=wout)
        check_close(f"sgd step {step}", wout, w64)

    # optimizer states saved and loaded, in distributed mode.
    kv.barrier()
    states = os.path.join(ckpt_dir, f"states-{rank}")
    kv.save_optimizer_states(states)
    assert os.path.getsize(states) > 0
    kv.load_optimizer_states(states)
    print("ok save/load optimizer states", flush=True)

    # a checkpoint below the servers' --checkpoint_root, dead nodes, a controller command.
    kv.barrier()
    if rank == 0:
        kv.checkpoint("ckpt-py")
        # An absolute directory below the servers' --checkpoint_root is taken as well.
        kv.checkpoint(os.path.join(os.path.realpath(ckpt_dir), "ckpt-abs", "run1"))
    kv.barrier()
    assert kv.num_dead_node(kvstore.SERVERS, 60) == 0
    assert kv.num_dead_node(kvstore.WORKERS, 60) == 0
    kv.send_command_to_servers(0, "sum")
    kv.barrier()
    s = per_worker(seed, n, (6,), 9)
    kv.push(7, s[rank])
    kv.pull(7, out=wout)
    check_close("updater 'sum' selected by a command", wout, w64 + s[0] + s[1])
    kv.barrier()


def async_job(kv, seed):
    n, rank = kv.num_workers, kv.rank
    assert kv.type == "dist_async"
    w = per_worker(seed, n, (10,), 1)
    kv.init(0, np.zeros(10, np.float32))
    kv.send_command_to_servers(0, "sum")
    kv.barrier()
    kv.push(0, w[rank])
    kv.barrier()
    out = np.zeros(10, np.float32)
    kv.pull(0, out=out)
    check_close("dist_async sum of both pushes", out, w[0].astype(np.float64) + w[1])


def interrupt_job(kv):
    """Rank 0 blocks in a barrier that rank 1 joins 4 s later; SIGINT after 1 s must raise
    KeyboardInterrupt within a second, and other threads run while it is blocked. Calling
    barrier again resumes the interrupted one."""
    rank = kv.rank
    if rank == 1:
        time.sleep(4.0)
        kv.barrier()
        kv.barrier()
        print("ok rank 1 barriers", flush=True)
        return
    ticks = [0]
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            ticks[0] += 1

    spinner = threading.Thread(target=spin)
    spinner.start()
    sent = [0.0]

    def interrupt():
        sent[0] = time.monotonic()
        os.kill(os.getpid(), signal.SIGINT)

    threading.Timer(1.0, interrupt).start()
    start = time.monotonic()
    try:
        kv.barrier()
        raise AssertionError("the barrier returned before rank 1 joined")
    except KeyboardInterrupt:
        delay = time.monotonic() - sent[0]
    stop.set()
    spinner.join()
    blocked = time.monotonic() - start
    print(f"ok KeyboardInterrupt {delay:.3f} s after SIGINT; {ticks[0]} ticks of another "
          f"thread in {blocked:.2f} s blocked", flush=True)
    assert delay < 1.0, delay
    assert ticks[0] > 10000, ticks[0]  # the GIL was released
    kv.barrier()  # resumes the interrupted barrier, which rank 1 joins
    kv.barrier()  # the second one
    print("ok rank 0 barriers", flush=True)


def main():
    scenario, ckpt_dir = sys.argv[1], sys.argv[2]
    seed = int(os.environ["KV_TEST_SEED"])
    kv = kvstore.create("dist_async" if scenario == "async" else "dist_sync")
    print(f"worker {kv.rank}: seed {seed}", flush=True)
    if scenario == "sync":
        sync_job(kv, seed, ckpt_dir)
    elif scenario == "async":
        async_job(kv, seed)
    else:
        interrupt_job(kv)
    print(f"worker {kv.rank}: done", flush=True)


if __name__ == "__main__":
    main()
