"""Shared fixtures: a random generator whose seed is printed (KV_TEST_SEED overrides it)."""
import os
import time

import numpy as np
import pytest


@pytest.fixture
def rng(request):
    seed = int(os.environ.get("KV_TEST_SEED", time.time_ns() % (2**31)))
    print(f"{request.node.name}: seed {seed} (KV_TEST_SEED={seed} repeats it)")
    return np.random.default_rng(seed)
