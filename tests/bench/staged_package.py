"""The kvstore package assembled for a benchmark's job: python/kvstore's files beside a built
module, in a temporary folder the job's processes import from (pybench.py, torchbench.py)."""
import contextlib
import os
import shutil
import tempfile


@contextlib.contextmanager
def staged_package(root, module):
    """Yields an environment (os.environ plus PYTHONPATH) whose `import kvstore` finds
    root/python/kvstore's files and `module` as kvstore/_kvstore.so; removed afterwards."""
    with tempfile.TemporaryDirectory() as tmp:
        os.makedirs(os.path.join(tmp, "kvstore"))
        for f in os.listdir(os.path.join(root, "python/kvstore")):
            if f.endswith(".py"):
                shutil.copy(os.path.join(root, "python/kvstore", f), os.path.join(tmp, "kvstore"))
        shutil.copy(module, os.path.join(tmp, "kvstore/_kvstore.so"))
        yield dict(os.environ, PYTHONPATH=tmp)
