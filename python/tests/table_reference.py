"""A float64 reference of a table (docs/tables.md) for the Python tests: rows made from the
initializer's row (read once from the store, before any push of the id), admission after
`admit_after` pushes (each distinct id counted once per push), the gradients of an id's
duplicates summed, and the row optimizers' steps as docs/optimizers.md writes them."""
import numpy as np


class TableReference:
    def __init__(self, dim, optimizer="sgd", lr=0.01, wd=0.0, rescale_grad=1.0,
                 clip_gradient=-1.0, beta1=0.9, beta2=0.999, epsilon=1e-8, admit_after=1):
        self.dim, self.optimizer, self.lr, self.wd = dim, optimizer, lr, wd
        self.rescale, self.clip = rescale_grad, clip_gradient
        self.beta1, self.beta2, self.epsilon = beta1, beta2, epsilon
        self.admit_after = admit_after
        self.rows = {}     # id -> [w, a, b, steps]
        self.counts = {}   # id -> pushes counted, not admitted yet
        self.initial = {}  # id -> its initializer's row

    def know_initial(self, id_, row):
        self.initial.setdefault(int(id_), np.asarray(row, dtype=np.float64).copy())

    def row(self, id_):
        id_ = int(id_)
        if id_ in self.rows:
            return self.rows[id_][0]
        return self.initial[id_]

    def push(self, ids, grads):
        sums = {}
        for id_, g in zip(np.asarray(ids).reshape(-1), np.asarray(grads, dtype=np.float64)):
            id_ = int(id_)
            sums[id_] = sums.get(id_, 0) + g
        for id_, g in sums.items():
            if id_ not in self.rows:
                self.counts[id_] = self.counts.get(id_, 0) + 1
                if self.counts[id_] < self.admit_after:
                    continue
                del self.counts[id_]
                z = np.zeros(self.dim)
                self.rows[id_] = [self.initial[id_].copy(), z.copy(), z.copy(), 0]
            self._step(self.rows[id_], g)

    def _step(self, row, grad):
        w, a, b, t = row
        t += 1
        g = grad * self.rescale
        if self.clip >= 0:
            g = np.clip(g, -self.clip, self.clip)
        g = g + self.wd * w
        if self.optimizer == "sgd":
            w = w - self.lr * g
        elif self.optimizer == "adagrad":
            a = a + g * g
            w = w - self.lr * g / (np.sqrt(a) + self.epsilon)
        else:
            a = self.beta1 * a + (1 - self.beta1) * g
            b = self.beta2 * b + (1 - self.beta2) * g * g
            lr_t = self.lr * np.sqrt(1 - self.beta2 ** t) / (1 - self.beta1 ** t)
            w = w - lr_t * a / (np.sqrt(b) + self.epsilon)
        row[:] = [w, a, b, t]
