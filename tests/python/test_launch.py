"""python3 -m gradpress.launch (issue 31): servers and Python workers started, watched and
stopped as one job; no process it started outlives it."""
import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time

import pytest

import gp_testlib

# A user's training script: a tiny model through DistributedOptimizer with no job argument,
# so the servers' job (config and launch overrides) comes from the environment launch sets.
TRAIN = """\
import os, sys, torch
import gradpress.torch as gp
torch.set_num_threads(1)
model = torch.nn.Linear(64, 32)  # 2048 weights: above compress.min_numel, so compressed
opt = gp.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                              model.named_parameters(), run_dir=os.environ["GRADPRESS_RUN_DIR"])
gp.broadcast_parameters(model, opt)
g = torch.Generator().manual_seed(opt.rank)
for step in range(int(sys.argv[1])):
    opt.zero_grad()
    model(torch.randn(8, 64, generator=g)).pow(2).mean().backward()
    opt.step()
s = opt.stats()
opt.close()
print(f"rank {os.environ['RANK']} local {os.environ['LOCAL_RANK']} of {os.environ['WORLD_SIZE']}"
      f" servers {os.environ.get('GRADPRESS_SERVERS', os.environ['GRADPRESS_SERVER'])}"
      f" bytes_up {s['bytes_up']} bytes_down {s['bytes_down']}")
"""

# Trains until stopped; rank 1 ignores SIGTERM (launch must SIGKILL it after --grace-s).
FOREVER = """\
import os, signal, torch
import gradpress.torch as gp
if os.environ["RANK"] == "1":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
torch.set_num_threads(1)
model = torch.nn.Linear(64, 32)
opt = gp.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                              model.named_parameters())
gp.broadcast_parameters(model, opt)
step = 0
while True:
    opt.zero_grad()
    model(torch.randn(8, 64)).pow(2).mean().backward()
    opt.step()
    if step == 1:
        open(os.path.join(os.environ["GRADPRESS_RUN_DIR"], f"running-{opt.rank}"), "w").close()
    step += 1
"""

# Rank 1 prints 30 numbered lines and exits 3; rank 0 waits to be stopped.
FAIL = """\
import os, sys, threading
rank = int(os.environ["RANK"])
for i in range(30):
    print(f"rank {rank} line {i}")
if rank == 1:
    sys.exit(3)
threading.Event().wait()
"""

DENSE = (64 * 32 + 32) * 4  # the Linear's float32 bytes


def job(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text(gp_testlib.job_yaml())
    return path


def launch(tmp_path, script_text, *flags, args=(), timeout_s=60):
    """Runs launch to its end; (returncode, stdout, stderr, run_dir)."""
    script = tmp_path / "train.py"
    script.write_text(script_text)
    run_dir = tmp_path / "run"
    p = subprocess.run([sys.executable, "-m", "gradpress.launch", "--server-bin",
                        str(gp_testlib.SERVER), "--run-dir", str(run_dir), *flags,
                        str(job(tmp_path)), str(script), *args],
                       capture_output=True, text=True, timeout=timeout_s)
    return p.returncode, p.stdout, p.stderr, run_dir


def processes_under(directory):
    """(pid, command line) of every live process whose command line names `directory`."""
    out = []
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue  # gone meanwhile
        if str(directory) in cmd and state != "Z":
            out.append((int(entry.name), cmd))
    return out


def assert_all_gone(run_dir, tmp_path):
    record = json.loads((run_dir / "launch.json").read_text())
    pids = [c["pid"] for c in record["servers"] + record["workers"]]
    assert len(pids) == len(record["servers"]) + len(record["workers"]) > 0
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert processes_under(tmp_path) == []
    for s in record["servers"]:  # nothing listens on the servers' ports any more
        host, port = s["address"].rsplit(":", 1)
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((host, int(port)), timeout=2).close()
    return record


@pytest.mark.parametrize("servers", [1, 2])
def test_two_workers_train_and_launch_exits_0_with_the_run_directory(tmp_path, servers):
    # The launch's codecs reach the servers and the workers alike: the pull codec is top-k
    # only if the servers got it, and the workers decode it only if they did too.
    rc, out, err, run_dir = launch(
        tmp_path, TRAIN, "--workers", "2", "--servers", str(servers),
        "--push", "topk ratio=0.05 error_feedback=true", "--pull", "{codec: topk, ratio: 0.05}",
        args=["4"])
    assert rc == 0, f"stdout:\n{out}\nstderr:\n{err}"
    for r in range(2):
        line = next(x for x in out.splitlines() if x.startswith(f"[{r}] rank {r} "))
        assert f"local {r} of 2" in line
        words = line.split()
        up = int(words[words.index("bytes_up") + 1])
        down = int(words[words.index("bytes_down") + 1])
        assert 0 < up < DENSE / 4 and 0 < down < DENSE / 4, line
        log = (run_dir / f"worker-{r}.log").read_text().splitlines()
        assert any(x.startswith(f"rank {r} local {r}") for x in log), log  # the script's output
        assert any(f"worker-{r}: " in x and "BLAS: " in x for x in log), log  # the session's
    record = assert_all_gone(run_dir, tmp_path)
    assert len(record["servers"]) == servers
    addresses = ",".join(s["address"] for s in record["servers"])
    assert f"servers {addresses} " in out
    for s in range(servers):
        assert "listening on port" in (run_dir / f"server-{s}.log").read_text()
    assert (run_dir / "config.yaml").exists()
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert sorted((x["rank"], x["step"]) for x in lines) == [(r, s) for r in range(2)
                                                             for s in range(4)]
    assert "all 2 worker(s) exited 0" in err


def test_a_failing_worker_stops_the_job_with_its_code_and_log_tail(tmp_path):
    rc, out, err, run_dir = launch(tmp_path, FAIL, "--workers", "2")
    assert rc == 3, f"stdout:\n{out}\nstderr:\n{err}"
    header = f"worker 1 exited with code 3; the last 20 lines of {run_dir / 'worker-1.log'}:"
    assert header in err
    tail = err.split(header, 1)[1].splitlines()[1:21]
    assert [x.strip() for x in tail] == [f"rank 1 line {i}" for i in range(10, 30)]
    assert "[0] rank 0 line 29" in out and "[1] rank 1 line 29" in out  # echoed with the rank
    assert_all_gone(run_dir, tmp_path)


def test_ctrl_c_stops_every_process_and_exits_130(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(FOREVER)
    run_dir = tmp_path / "run"
    p = subprocess.Popen([sys.executable, "-m", "gradpress.launch", "--server-bin",
                          str(gp_testlib.SERVER), "--run-dir", str(run_dir), "--workers", "2",
                          "--grace-s", "2", str(job(tmp_path)), str(script)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not all((run_dir / f"running-{r}").exists() for r in range(2)):
            assert p.poll() is None, p.communicate()
            assert time.monotonic() < deadline, "the workers did not start training in 60 s"
            time.sleep(0.05)
        started = time.monotonic()
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=30)
        # Rank 1 ignores SIGTERM: 2 s of grace, then SIGKILL; the server as much again at most.
        assert time.monotonic() - started < 15
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    assert p.returncode == 130, f"stdout:\n{out}\nstderr:\n{err}"
    assert "SIGINT: stopping" in err and "worker 1 did not exit within 2 s" in err
    assert_all_gone(run_dir, tmp_path)


@pytest.mark.parametrize("flags,message", [
    (["--workers", "0"], "--workers must be at least 1"),
    (["--workers", "2", "--config-missing"], "config: no such file"),
    (["--workers", "2", "--script-missing"], "script: no such file"),
    (["--workers", "2", "--server-bin", "/nonexistent/gradpress-server"], "not an executable"),
    (["--workers", "2", "--set", "no-equals-sign"], "--set takes KEY=VALUE"),
])
def test_bad_arguments_exit_2_with_one_line_and_start_nothing(tmp_path, flags, message):
    config, script = job(tmp_path), tmp_path / "train.py"
    script.write_text(TRAIN)
    if "--config-missing" in flags:
        config = tmp_path / "missing.yaml"
    if "--script-missing" in flags:
        script = tmp_path / "missing.py"
    flags = [f for f in flags if not f.endswith("-missing")]
    if "--server-bin" not in flags:
        flags += ["--server-bin", str(gp_testlib.SERVER)]
    p = subprocess.run([sys.executable, "-m", "gradpress.launch", "--run-dir",
                        str(tmp_path / "run"), *flags, str(config), str(script)],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 2
    assert p.stderr.count("\n") == 1 and message in p.stderr, p.stderr
    assert p.stdout == "" and not (tmp_path / "run").exists()
