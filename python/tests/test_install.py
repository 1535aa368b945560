"""The one-command install's last step: the wheel Bazel built installs with pip, offline, into a
fresh virtual environment, and `import kvstore` works in a new process of that environment.

The environment is made without its own pip (ensurepip takes 10 s here) and with the system's
site packages, whose pip (Debian's python3-pip) then installs into the environment."""
import os
import subprocess
import sys



def test_wheel_installs_into_a_fresh_venv(tmp_path):
    wheel = os.path.abspath(os.environ["KV_TEST_WHEEL"])
    venv = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip",
                    str(venv)], check=True, timeout=60)
    python = str(venv / "bin" / "python")
    # --ignore-installed: a kvstore already installed in the system Python (which the
    # environment sees) must not stand in for this one.
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                    "--ignore-installed", "--disable-pip-version-check", wheel],
                   check=True, timeout=60)
    # A new process without the test's PYTHONPATH, from another folder: what a new shell sees.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    code = ("import kvstore; kv = kvstore.create('local'); print(kvstore.__file__, kv.type);"
            " import numpy as np; kv.init(1, np.arange(3.0)); a = np.zeros(3);"
            " kv.pull(1, out=a); assert list(a) == [0.0, 1.0, 2.0], a")
    out = subprocess.run([python, "-c", code], env=env, cwd=str(tmp_path), check=True,
                         stdout=subprocess.PIPE, text=True, timeout=60).stdout
    print(out)
    assert out.startswith(str(venv)) and out.strip().endswith("local")


def test_install_script_installs_for_the_python3_on_path(tmp_path):
    """deploy/install-wheel.sh (install-python.sh's last step) with no interpreter named
    installs for the `python3` that PATH finds first - here a virtual environment's, as a
    pyenv, conda or activated environment would be - and says which; `python3 -c "import
    kvstore"` then works, as the README's next line runs it."""
    wheel = os.path.abspath(os.environ["KV_TEST_WHEEL"])
    script = os.path.abspath(os.environ["KV_TEST_INSTALL_WHEEL"])
    venv = tmp_path / "other"
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", "--without-pip",
                    str(venv)], check=True, timeout=60)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PATH"] = f"{venv / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}"
    # Make the system's kvstore invisible in the environment, so only this install can serve.
    env["PIP_IGNORE_INSTALLED"] = "1"
    proc = subprocess.run(["bash", script, wheel], env=env, cwd=str(tmp_path),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=120)
    print(proc.stdout)
    assert proc.returncode == 0
    assert f"for {venv / 'bin' / 'python3'} (Python" in proc.stdout
    out = subprocess.run(["python3", "-c", "import kvstore; print(kvstore.__file__)"], env=env,
                         cwd=str(tmp_path), check=True, stdout=subprocess.PIPE, text=True,
                         timeout=60).stdout
    assert out.startswith(str(venv)), out
    # An interpreter that does not run is refused, naming it.
    proc = subprocess.run(["bash", script, wheel, str(tmp_path / "no-python")], env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=60)
    assert proc.returncode != 0 and "no-python" in proc.stdout
