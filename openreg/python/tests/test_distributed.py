"""torch.distributed over occl: every scenario runs in separate processes (distributed_workers.py
forks the ranks), each bounded in time; a run that exceeds it is killed with all its processes."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

WORKERS = Path(__file__).with_name("distributed_workers.py")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ANCHOR: run
def run(scenario: str, world: int, timeout: float = 120, exits=None, env=None):
    """Runs ``scenario`` in ``world`` ranks (distributed_workers.py forks them) and waits for
    all of them, at most ``timeout`` seconds; fails with every rank's output unless each
    exits with ``exits[rank]`` (0)."""
    logs = Path(tempfile.mkdtemp(prefix=f"{scenario}-"))
    launcher = subprocess.Popen(
        [sys.executable, str(WORKERS), scenario, str(world), str(free_port()), str(logs)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # a process group of its own, ranks included: killed as a whole
        # One OpenMP thread per rank, as torchrun sets for several processes on one machine:
        # ranks that share the cores would otherwise spin in each other's way.
        env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})},
    )

    def report(codes):
        return "\n".join(f"--- rank {r} exited {c}\n" + (logs / f"rank{r}.log").read_text(errors="replace")
                         for r, c in zip(range(world), codes) if (logs / f"rank{r}.log").exists())

    try:
        output = launcher.communicate(timeout=timeout)[0]
    except subprocess.TimeoutExpired:
        os.killpg(launcher.pid, signal.SIGKILL)  # the launcher and every rank it forked
        launcher.communicate()
        pytest.fail(f"{scenario} with {world} ranks did not finish within {timeout} s\n{report(['-'] * world)}")
    finally:
        if launcher.poll() is None:  # no process is left behind, whatever happened
            os.killpg(launcher.pid, signal.SIGKILL)
            launcher.wait()
    lines = output.strip().splitlines()
    codes = json.loads(lines[-1]) if launcher.returncode == 0 and lines else None
    if codes != (exits or [0] * world):
        pytest.fail(f"{scenario}: exit codes {codes}\n{output if codes is None else ''}{report(codes or ['?'] * world)}")
    shutil.rmtree(logs, ignore_errors=True)
# ANCHOR_END: run


TRANSPORTS = {"shm": {}, "tcp": {"OCCL_SHM": "0"}}


@pytest.mark.parametrize("world", [2, 4])
def test_every_collective_and_dtype(world):
    run("collectives", world, timeout=240)


def test_every_collective_and_dtype_over_tcp():
    run("collectives", 2, timeout=240, env=TRANSPORTS["tcp"])


def test_async_collective_overlaps_with_compute_on_another_stream():
    run("async_overlap", 2)


def test_default_backend_mixed_backends_and_device_mesh():
    run("default_backend", 2)
    run("mixed_backends", 2)


def test_bad_input_raises_and_the_group_survives_or_is_replaced():
    run("bad_input", 2)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_dead_rank_fails_the_others_without_a_hang(transport):
    run("dead_rank", 3, timeout=60, env=TRANSPORTS[transport])


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_silent_rank_times_out(transport):
    run("stuck_rank", 2, timeout=60, env=TRANSPORTS[transport])


@pytest.mark.parametrize("world", [2, 4])
def test_ddp_matches_one_process(world):
    run("ddp", world)


def test_fsdp2_matches_one_process():
    run("fsdp2", 2)


def test_dtensor_basics():
    run("dtensor", 2)


def test_the_watchdog_aborts_an_operation_stuck_past_its_timeout():
    run("watchdog", 2, timeout=60)


def test_work_is_cpp_and_completes_and_fails_without_wait():
    run("work_contract", 2)


def test_a_thousand_async_all_reduces_in_flight():
    run("many_in_flight", 2)


def test_new_group_over_a_subset_and_split_group():
    run("subgroups", 4)


def test_ddp_comm_hooks_allreduce_and_bf16_compression():
    run("ddp_comm_hooks", 2)
