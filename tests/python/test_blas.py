"""Python's torch multiplies with the optimized BLAS that scripts/setup.sh installs (Debian's
alternatives make OpenBLAS the libblas.so.3 of python3-torch, as of gradpress-worker's LibTorch),
and the launcher's one thread per worker reaches the BLAS."""
import os
import subprocess
import sys

import pytest
import torch


def loaded_blas():
    """The BLAS libraries mapped into this process, links resolved."""
    libs = set()
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1] if len(line.split()) >= 6 else ""
            name = os.path.basename(path)
            if name.startswith(("libblas.so", "libopenblas")):
                libs.add(os.path.realpath(path))
    return libs


def test_python_torch_runs_on_openblas():
    a = torch.ones(64, 64)
    assert torch.mm(a, a).sum().item() == 64.0 ** 3
    libs = loaded_blas()
    assert libs, "no BLAS library is mapped after a matrix product"
    assert any("openblas" in p for p in libs), (
        f"python3-torch multiplies with {sorted(libs)}, not OpenBLAS: run scripts/setup.sh")


def test_omp_num_threads_sets_torch_and_openblas_threads():
    # gradpress.launch gives each worker OMP_NUM_THREADS (as torchrun does); the OpenMP build of
    # OpenBLAS follows it, so the BLAS adds no threads of its own beside torch's.
    code = ("import ctypes, torch\n"
            "torch.mm(torch.ones(8, 8), torch.ones(8, 8))\n"
            "lib = ctypes.CDLL('libopenblas.so.0')\n"
            "print(torch.get_num_threads(), lib.openblas_get_num_threads())\n")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True, timeout=120).stdout.split()
    assert out == ["1", "1"], out


def test_a_session_gives_the_blas_torchs_thread_count():
    # OpenBLAS starts with one thread per core; a worker whose torch runs one intra-op thread
    # must not multiply on more (the session sets the BLAS's count to torch's).
    if (os.cpu_count() or 1) < 2:
        pytest.skip("one core: OpenBLAS's own default is already one thread")
    code = ("import ctypes, torch\n"
            "import gradpress.torch as gp\n"
            "import gp_testlib\n"
            "torch.set_num_threads(1)\n"
            "lib = ctypes.CDLL('libopenblas.so.0')\n"
            "before = lib.openblas_get_num_threads()\n"
            "model = gp_testlib.make_model()\n"
            "opt = gp.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),\n"
            "                              model.named_parameters(), rank=0, world_size=2,\n"
            "                              server='127.0.0.1:1')\n"
            "print('threads', before, torch.get_num_threads(), lib.openblas_get_num_threads())\n")
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(__file__)] + sys.path)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True, timeout=120).stdout
    out = [line.split()[1:] for line in out.splitlines() if line.startswith("threads ")][0]
    assert out[0] != "1", f"OpenBLAS started with {out[0]} thread: the test cannot tell"
    assert out[1:] == ["1", "1"], out
