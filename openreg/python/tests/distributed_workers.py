"""The processes of test_distributed.py: ``python distributed_workers.py SCENARIO WORLD PORT LOGS``
imports torch, forks WORLD ranks and prints their exit codes.

Each scenario runs in every rank, checks its results with asserts and exits 0; a failure
exits non-zero with the traceback in the rank's log (LOGS/rank<N>.log), which the test prints.
"""

import datetime
import gc
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int64]


def device(rank):
    # Two simulated devices; with four processes two share each (each has its own runtime).
    return torch.device("openreg", rank % 2)


def init(rank, world, backend="occl", **kwargs):
    torch.openreg.set_device(device(rank))
    dist.init_process_group(backend, rank=rank, world_size=world, **kwargs)


def data(r, n, dtype, low=0, high=8):
    """Rank r's deterministic input, small integers: exact in every dtype."""
    g = torch.Generator().manual_seed(1000 + r * 17 + n)
    return torch.randint(low, high, (n,), generator=g).to(dtype)


def expected(world, n, dtype, op):
    """What the reduction of every rank's ``data`` must give, computed in float64 on the CPU."""
    low = 1 if op == dist.ReduceOp.PRODUCT else 0
    high = 4 if op == dist.ReduceOp.PRODUCT else 8
    xs = torch.stack([data(r, n, torch.float64, low, high) for r in range(world)])
    if op == dist.ReduceOp.SUM:
        out = xs.sum(0)
    elif op == dist.ReduceOp.AVG:
        out = xs.sum(0) / world
        if not dtype.is_floating_point:
            out = out.trunc()
    elif op == dist.ReduceOp.PRODUCT:
        out = xs.prod(0)
    elif op == dist.ReduceOp.MIN:
        out = xs.min(0).values
    else:
        out = xs.max(0).values
    return out.to(dtype)


def same(got, want, what):
    got = got.cpu()
    assert got.dtype == want.dtype and got.shape == want.shape, (what, got.dtype, got.shape, want.shape)
    assert torch.equal(got, want), (what, got, want)


# ANCHOR: collectives
def collectives(rank, world):
    """Every collective and dtype, from 0 elements up, on this rank's device."""
    init(rank, world)
    dev = device(rank)
    # shared memory unless disabled, or unless this machine has no /dev/shm to put it in
    shm_ok = os.access("/dev/shm", os.W_OK) and os.environ.get("OCCL_SHM") != "0"
    transport = "shm" if shm_ok else "tcp"
    links = dist.group.WORLD._get_backend(dev).transports
    assert links == [transport if r != rank else "self" for r in range(world)], links
    ops = [dist.ReduceOp.SUM, dist.ReduceOp.AVG, dist.ReduceOp.PRODUCT, dist.ReduceOp.MIN, dist.ReduceOp.MAX]
    for dtype in DTYPES:
        # 0, 1, odd, above the direct all-reduce's 64 KiB (ring, unequal chunks)
        for n in [0, 1, 7, 40_001]:
            for op in ops:
                low, high = (1, 4) if op == dist.ReduceOp.PRODUCT else (0, 8)
                t = data(rank, n, dtype, low, high).to(dev)
                dist.all_reduce(t, op=op)
                same(t, expected(world, n, dtype, op), f"all_reduce {op} {dtype} {n}")
            for root in range(world):
                t = data(rank, n, dtype).to(dev)
                dist.broadcast(t, src=root)
                same(t, data(root, n, dtype), f"broadcast {dtype} {n} root {root}")
                t = data(rank, n, dtype).to(dev)
                dist.reduce(t, dst=root, op=dist.ReduceOp.SUM)
                if rank == root:
                    same(t, expected(world, n, dtype, dist.ReduceOp.SUM), f"reduce {dtype} {n}")
            mine = data(rank, n, dtype).to(dev)
            outs = [torch.full((n,), -1, dtype=dtype, device=dev) for _ in range(world)]
            dist.all_gather(outs, mine)
            for r, o in enumerate(outs):
                same(o, data(r, n, dtype), f"all_gather {dtype} {n}")
            flat = torch.empty(world * n, dtype=dtype, device=dev)
            dist.all_gather_into_tensor(flat, mine)
            same(flat, torch.cat([data(r, n, dtype) for r in range(world)]), f"all_gather_into_tensor {dtype} {n}")
            full = [data(r, world * n, dtype) for r in range(world)]
            want = torch.stack(full).to(torch.float64).sum(0).to(dtype)[rank * n:(rank + 1) * n]
            out = torch.empty(n, dtype=dtype, device=dev)
            dist.reduce_scatter_tensor(out, full[rank].to(dev))
            same(out, want, f"reduce_scatter_tensor {dtype} {n}")
            out = torch.empty(n, dtype=dtype, device=dev)
            dist.reduce_scatter(out, [c.to(dev) for c in full[rank].chunk(world)] if n else
                                [torch.empty(0, dtype=dtype, device=dev)] * world)
            same(out, want, f"reduce_scatter {dtype} {n}")
            # all_to_all_single, even and uneven: rank r sends (j + 1) * n rows to rank j
            inp = data(rank, world * n, dtype).to(dev)
            out = torch.empty(world * n, dtype=dtype, device=dev)
            dist.all_to_all_single(out, inp)
            same(out, torch.cat([data(r, world * n, dtype)[rank * n:(rank + 1) * n] for r in range(world)]),
                 f"all_to_all_single {dtype} {n}")
            sends = [(j + 1) * n for j in range(world)]
            inp = data(rank, sum(sends), dtype).to(dev)
            out = torch.empty(world * (rank + 1) * n, dtype=dtype, device=dev)
            dist.all_to_all_single(out, inp, [(rank + 1) * n] * world, sends)
            start = sum(sends[:rank])
            same(out, torch.cat([data(r, sum(sends), dtype)[start:start + (rank + 1) * n] for r in range(world)]),
                 f"all_to_all_single uneven {dtype} {n}")
            outs = [torch.empty(n, dtype=dtype, device=dev) for _ in range(world)]
            dist.all_to_all(outs, [c.to(dev) for c in data(rank, world * n, dtype).split(n)] if n else
                            [torch.empty(0, dtype=dtype, device=dev)] * world)
            for r, o in enumerate(outs):
                same(o, data(r, world * n, dtype)[rank * n:(rank + 1) * n], f"all_to_all {dtype} {n}")
            root = world - 1
            outs = [torch.empty(n, dtype=dtype, device=dev) for _ in range(world)] if rank == root else None
            dist.gather(mine, outs, dst=root)
            if rank == root:
                for r, o in enumerate(outs):
                    same(o, data(r, n, dtype), f"gather {dtype} {n}")
            out = torch.empty(n, dtype=dtype, device=dev)
            dist.scatter(out, [data(r, n, dtype).to(dev) for r in range(world)] if rank == 0 else None, src=0)
            same(out, data(rank, n, dtype), f"scatter {dtype} {n}")
            # send/recv around the ring, both directions issued without deadlock (isend/irecv)
            got = torch.empty(n, dtype=dtype, device=dev)
            reqs = [dist.isend(mine, (rank + 1) % world), dist.irecv(got, (rank - 1) % world)]
            for r in reqs:
                r.wait()
            same(got, data((rank - 1) % world, n, dtype), f"send/recv {dtype} {n}")
            # the same through batch_isend_irecv, which coalesces them (start/endCoalescing)
            got = torch.empty(n, dtype=dtype, device=dev)
            p2p = [dist.P2POp(dist.isend, mine, (rank + 1) % world), dist.P2POp(dist.irecv, got, (rank - 1) % world)]
            for r in dist.batch_isend_irecv(p2p):
                r.wait()
            same(got, data((rank - 1) % world, n, dtype), f"batch_isend_irecv {dtype} {n}")
    # 64 MiB buffers through the ring, the chain and the pairwise exchange
    big = torch.full((16 << 20,), float(rank + 1), device=dev)
    dist.all_reduce(big)
    assert big.min().item() == big.max().item() == world * (world + 1) / 2
    half = torch.full((32 << 20,), float(rank + 1), dtype=torch.bfloat16, device=dev)
    dist.all_reduce(half, op=dist.ReduceOp.MAX)
    assert half.min().item() == half.max().item() == world
    big.fill_(rank)
    dist.broadcast(big, src=world - 1)
    assert big.min().item() == big.max().item() == world - 1
    flat = torch.empty(16 << 20, device=dev)
    dist.all_gather_into_tensor(flat, torch.full(((16 << 20) // world,), float(rank), device=dev))
    same(flat, torch.arange(world, dtype=torch.float32).repeat_interleave((16 << 20) // world), "all_gather 64 MiB")
    out = torch.empty((16 << 20) // world, device=dev)
    dist.reduce_scatter_tensor(out, torch.full((16 << 20,), 1.0, device=dev))
    assert out.min().item() == out.max().item() == world
    out = torch.empty(16 << 20, device=dev)
    dist.all_to_all_single(out, torch.full((16 << 20,), float(rank), device=dev))
    same(out, torch.arange(world, dtype=torch.float32).repeat_interleave((16 << 20) // world), "all_to_all 64 MiB")
    del big, half, flat, out
    # the coalesced forms DDP and FSDP2 use
    ts = [data(rank, n, torch.float32).to(dev) for n in (3, 70_000)]
    with dist._coalescing_manager(async_ops=True) as cm:
        for t in ts:
            dist.all_reduce(t)
    cm.wait()
    for t, n in zip(ts, (3, 70_000)):
        same(t, expected(world, n, torch.float32, dist.ReduceOp.SUM), "coalesced all_reduce")
    outs = [torch.empty(world * n, device=dev) for n in (2, 5)]
    ins = [data(rank, n, torch.float32).to(dev) for n in (2, 5)]
    with dist._coalescing_manager():
        for o, i in zip(outs, ins):
            dist.all_gather_into_tensor(o, i)
    for o, n in zip(outs, (2, 5)):
        same(o, torch.cat([data(r, n, torch.float32) for r in range(world)]), "coalesced all_gather_into_tensor")
    outs = [torch.empty(n, device=dev) for n in (2, 5)]
    with dist._coalescing_manager():
        for o, n in zip(outs, (2, 5)):
            dist.reduce_scatter_tensor(o, data(rank, world * n, torch.float32).to(dev))
    for o, n in zip(outs, (2, 5)):
        want = torch.stack([data(r, world * n, torch.float32) for r in range(world)]).sum(0)[rank * n:(rank + 1) * n]
        same(o, want, "coalesced reduce_scatter_tensor")
    dist.barrier()
    dist.destroy_process_group()
# ANCHOR_END: collectives


def async_overlap(rank, world):
    """An async all-reduce runs on the group's stream while compute runs on another."""
    init(rank, world)
    dev = device(rank)
    t = torch.full((1000,), float(rank + 1), device=dev)
    if rank == 1:
        time.sleep(1.0)  # rank 0's all-reduce cannot finish before rank 1 joins
    work = dist.all_reduce(t, async_op=True)
    future = work.get_future()
    side = torch.openreg.Stream(dev)
    with side:
        x = torch.randn(256, 256, device=dev)
        y = (x @ x).sum()
    side.synchronize()  # the compute finished ...
    if rank == 0:
        assert not future.done(), "the compute waited for the all-reduce"  # ... before the collective
        try:  # a bounded wait gives up with a clear error (the collective goes on)
            work.wait(timeout=datetime.timedelta(milliseconds=100))
            raise AssertionError("wait(timeout) returned before rank 1 joined")
        except dist.DistBackendError as e:
            assert "did not complete within 0.1 s" in str(e), str(e)
    work.wait()
    assert torch.isfinite(y).item()
    same(t, torch.full((1000,), float(world * (world + 1) / 2)), "async all_reduce")
    assert future.wait()[0] is t or torch.equal(future.wait()[0].cpu(), t.cpu())
    dist.destroy_process_group()


def default_backend(rank, world):
    """init_process_group() with no backend picks occl for openreg."""
    init(rank, world, backend=None)
    assert "openreg:occl" in dist.get_backend_config(), dist.get_backend_config()
    from torch_openreg.openreg.distributed import ProcessGroupOCCL

    assert isinstance(dist.group.WORLD._get_backend(device(rank)), ProcessGroupOCCL)
    t = torch.ones(3, device=device(rank))
    dist.all_reduce(t)
    same(t, torch.full((3,), float(world)), "default backend")
    dist.destroy_process_group()


def mixed_backends(rank, world):
    """"cpu:gloo,openreg:occl" serves both devices; init_device_mesh("openreg") works. (A
    scenario of its own, with its own port: a second init_process_group on the first one's
    port could reach the first store before its owner closed it, and wait forever.)"""
    init(rank, world, backend="cpu:gloo,openreg:occl")
    c, d = torch.ones(2), torch.ones(2, device=device(rank))
    dist.all_reduce(c)
    dist.all_reduce(d)
    same(c, torch.full((2,), float(world)), "gloo part")
    same(d, torch.full((2,), float(world)), "occl part")
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("openreg", (world,))
    assert mesh.device_type == "openreg"
    assert mesh.get_group().group_name
    dist.destroy_process_group()


def bad_input(rank, world):
    """Each bad call raises a Python exception naming the problem; the group stays usable
    for errors caught before any message was sent, and a new group replaces a failed one."""
    init(rank, world, timeout=datetime.timedelta(seconds=20))
    dev = device(rank)

    def raises(kind, words, fn):
        try:
            fn()
        except kind as e:
            assert all(w in str(e) for w in words), (words, str(e))
            return
        raise AssertionError(f"expected {kind.__name__} with {words}")

    # A CPU tensor: c10d finds no backend for it in an occl-only group; mixed with an openreg
    # tensor it reaches occl, which names it.
    raises(RuntimeError, ["No backend type associated with device type cpu"], lambda: dist.all_reduce(torch.ones(2)))
    raises(ValueError, ["expected openreg tensors", "cpu"],
           lambda: dist.all_gather_into_tensor(torch.ones(2 * world, device=dev), torch.ones(2)))
    raises(ValueError, ["unsupported reduce op", "BAND"],
           lambda: dist.all_reduce(torch.ones(2, device=dev), op=dist.ReduceOp.BAND))
    raises(ValueError, ["contiguous"], lambda: dist.all_reduce(torch.ones(4, 4, device=dev).t()))
    raises(ValueError, ["root 5 is out of range"], lambda: dist.broadcast(torch.ones(2, device=dev), src=5))
    raises(ValueError, ["peer 7 is out of range"], lambda: dist.send(torch.ones(2, device=dev), dst=7))
    raises(ValueError, ["split sizes"],
           lambda: dist.all_to_all_single(torch.ones(4, device=dev), torch.ones(4, device=dev), [1, 1], [3, 3]))
    # still usable after the checks above: nothing was sent
    t = torch.ones(2, device=dev)
    dist.all_reduce(t)
    same(t, torch.full((2,), float(world)), "after bad input")
    # mismatched sizes, then dtypes, across ranks: every rank gets DistBackendError
    for make in [lambda: torch.ones(10 + rank, device=dev),
                 lambda: torch.ones(10, dtype=torch.float32 if rank == 0 else torch.float16, device=dev)]:
        group = dist.new_group(backend="occl")
        raises(dist.DistBackendError, ["occl all_reduce"], lambda: dist.all_reduce(make(), group=group))
        raises(dist.DistBackendError, ["aborted by an earlier failure"],
               lambda: dist.all_reduce(torch.ones(2, device=dev), group=group))
        # the same failure through an asynchronous Work's future
        group = dist.new_group(backend="occl")
        future = dist.all_reduce(make(), group=group, async_op=True).get_future()
        raises(RuntimeError, ["occl all_reduce"], future.wait)
        # the failed group refuses further work at once, naming the first failure
        raises(dist.DistBackendError, ["aborted by an earlier failure"],
               lambda: dist.all_reduce(torch.ones(2, device=dev), group=group))
    # the default group was not affected
    t = torch.ones(2, device=dev)
    dist.all_reduce(t)
    same(t, torch.full((2,), float(world)), "default group after a failed one")
    dist.barrier()
    backend = dist.group.WORLD._get_backend(dev)
    dist.destroy_process_group()
    raises(ValueError, ["not been initialized"], lambda: dist.all_reduce(torch.ones(2, device=dev)))
    raises(dist.DistBackendError, ["destroyed"],
           lambda: backend.allreduce([torch.ones(2, device=dev)], dist.AllreduceOptions()))
    # rank or world size out of range at construction
    from torch_openreg.openreg.distributed import ProcessGroupOCCL

    raises(ValueError, ["rank 5 is out of range for a world of size 2"],
           lambda: ProcessGroupOCCL(dist.HashStore(), 5, 2))
    from torch_openreg.openreg.distributed import Options

    raises(ValueError, ["timeout must be positive"], lambda: Options(timeout=datetime.timedelta(0)))
    raises(TypeError, ["incompatible"], lambda: ProcessGroupOCCL("not a store", 0, 1))


def dead_rank(rank, world):
    """A rank that dies mid-collective: the others raise within the timeout, no hang."""
    init(rank, world, timeout=datetime.timedelta(seconds=30))
    dev = device(rank)
    t = torch.ones(1 << 20, device=dev)
    dist.all_reduce(t)  # everyone connected and working
    if rank == world - 1:
        dist.all_reduce(t, async_op=True)  # starts, then the process dies
        os._exit(0)
    start = time.monotonic()
    try:
        dist.all_reduce(t)
        raise AssertionError("all_reduce with a dead rank returned")
    except dist.DistBackendError as e:
        assert "closed its connection" in str(e) or "aborted" in str(e), str(e)
    assert time.monotonic() - start < 30
    dist.destroy_process_group()


def stuck_rank(rank, world):
    """A rank that is alive but never joins: the others time out (pg_options' timeout)."""
    from torch_openreg.openreg.distributed import Options

    init(rank, world, pg_options=Options(timeout=datetime.timedelta(seconds=2)))
    dev = device(rank)
    dist.barrier()
    if rank == 1:
        time.sleep(4)  # alive, silent, longer than the timeout
        dist.destroy_process_group()
        return
    start = time.monotonic()
    try:
        dist.all_reduce(torch.ones(4, device=dev))
        raise AssertionError("all_reduce with a silent rank returned")
    except dist.DistBackendError as e:
        assert "timed out after 2.0 s" in str(e) and "rank 1" in str(e), str(e)
    took = time.monotonic() - start
    assert 1.5 < took < 10, took
    dist.destroy_process_group()


# ANCHOR: ddp
def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 32), nn.GELU(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 4))


def batches(world, steps=3, per_rank=4):
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(world * per_rank, 8, generator=g), torch.randn(world * per_rank, 4, generator=g))
            for _ in range(steps)]


def reference(world, optimizer=torch.optim.SGD, **kw):
    """The same model trained in one process on the concatenated batches (CPU)."""
    model = mlp()
    opt = optimizer(model.parameters(), **kw)
    for x, y in batches(world):
        loss = ((model(x) - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model


def train(model, rank, world, optimizer=torch.optim.SGD, **kw):
    opt = optimizer(model.parameters(), **kw)
    dev = device(rank)
    for x, y in batches(world):
        x, y = x.chunk(world)[rank].to(dev), y.chunk(world)[rank].to(dev)
        loss = ((model(x) - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


def ddp(rank, world):
    """DistributedDataParallel equals one process on the whole batch."""
    init(rank, world, device_id=device(rank))
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = DDP(mlp().to(device(rank)), bucket_cap_mb=0.001)  # several buckets
    train(model, rank, world, torch.optim.SGD, lr=0.1, momentum=0.9)
    want = reference(world, torch.optim.SGD, lr=0.1, momentum=0.9)
    for (name, p), q in zip(model.module.named_parameters(), want.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-5, atol=1e-6, msg=name)
    dist.destroy_process_group()
# ANCHOR_END: ddp


def fsdp2(rank, world):
    """FSDP2's fully_shard (parameters sharded over the mesh) equals one process."""
    init(rank, world, device_id=device(rank))
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("openreg", (world,))
    model = mlp().to(device(rank))
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    shard = next(model.parameters())
    assert shard.to_local().shape[0] == 32 // world, shard.to_local().shape  # really sharded
    train(model, rank, world, torch.optim.AdamW, lr=0.01)
    want = reference(world, torch.optim.AdamW, lr=0.01)
    for p, q in zip(model.parameters(), want.parameters()):
        torch.testing.assert_close(p.full_tensor().cpu(), q.detach(), rtol=1e-5, atol=1e-6)
    dist.destroy_process_group()


def dtensor(rank, world):
    """DTensor on an openreg mesh: shard, redistribute, compute, gather back."""
    init(rank, world)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    mesh = init_device_mesh("openreg", (world,))
    a = torch.arange(64.0).reshape(8, 8)
    da = distribute_tensor(a.to(device(rank)), mesh, [Shard(0)])
    same(da.to_local(), a.chunk(world)[rank], "Shard(0)")
    replicated = da.redistribute(mesh, [Replicate()])
    same(replicated.to_local(), a, "Replicate")
    columns = da.redistribute(mesh, [Shard(1)])
    same(columns.to_local(), a.chunk(world, dim=1)[rank], "Shard(1)")
    product = (da @ replicated).full_tensor()
    same(product, a @ a, "matmul")
    total = da.sum().full_tensor()
    same(total, a.sum(), "sum")
    dist.destroy_process_group()


# ANCHOR: work_contract
def work_contract(rank, world):
    """The Work c10d hands back is C++ (no Python subclass): is_completed() turns true on its
    own, and a failed one reports its exception without anyone calling wait()."""
    init(rank, world)
    dev = device(rank)
    t = torch.full((1000,), float(rank + 1), device=dev)
    work = dist.all_reduce(t, async_op=True)
    assert type(work) is dist.Work, type(work)  # the C++ WorkOCCL, seen through its base class
    deadline = time.monotonic() + 30
    while not work.is_completed():
        assert time.monotonic() < deadline, "is_completed() never turned true"
        time.sleep(0.001)
    assert work.is_success() and work.exception() is None
    same(t, torch.full((1000,), float(world * (world + 1) / 2)), "completed without wait")
    assert work.get_future().done()  # the watcher completed the future too
    # The profiler shows each collective under its name, as nccl:all_reduce for NCCL.
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        dist.all_reduce(t)
        dist.all_gather_into_tensor(torch.empty(2 * world, device=dev), torch.ones(2, device=dev))
    names = {e.name for e in prof.events()}
    assert {"occl:all_reduce", "occl:all_gather_into_tensor"} <= names, sorted(names)
    # A failure (sizes differ across ranks), observed only through the Work's state.
    group = dist.new_group(backend="occl")
    work = dist.all_reduce(torch.ones(10 + rank, device=dev), group=group, async_op=True)
    deadline = time.monotonic() + 30
    while not work.is_completed():
        assert time.monotonic() < deadline, "a failed Work never completed"
        time.sleep(0.001)
    assert not work.is_success()
    error = work.exception()
    assert isinstance(error, dist.DistBackendError) and "occl all_reduce" in str(error), repr(error)
    try:
        work.get_future().wait()
        raise AssertionError("the failed Work's future did not raise")
    except RuntimeError as e:
        assert "occl all_reduce" in str(e), str(e)
    dist.destroy_process_group()
# ANCHOR_END: work_contract


def many_in_flight(rank, world):
    """1,000 async all-reduces issued before any is waited for: each completes with its sum."""
    init(rank, world)
    dev = device(rank)
    tensors = [torch.full((4,), float(i + rank), device=dev) for i in range(1000)]
    works = [dist.all_reduce(t, async_op=True) for t in tensors]
    for w in works:
        w.wait()
    total = sum(range(world))
    got = torch.stack(tensors).cpu()
    want = torch.stack([torch.full((4,), float(world * i + total)) for i in range(1000)])
    same(got, want, "1000 in-flight all-reduces")
    assert all(w.is_completed() and w.is_success() for w in works)
    dist.destroy_process_group()


def subgroups(rank, world):
    """new_group over a subset of ranks, and split_group into disjoint groups."""
    init(rank, world, device_id=device(rank))
    dev = device(rank)
    evens = dist.new_group([r for r in range(world) if r % 2 == 0], backend="occl")
    if rank % 2 == 0:
        t = torch.full((3,), float(rank), device=dev)
        dist.all_reduce(t, group=evens)
        same(t, torch.full((3,), float(sum(r for r in range(world) if r % 2 == 0))), "new_group of the evens")
        assert dist.get_world_size(evens) == (world + 1) // 2
    halves = [list(range(world // 2)), list(range(world // 2, world))]
    mine = halves[0] if rank < world // 2 else halves[1]
    split = dist.split_group(split_ranks=halves)
    assert split is not None and dist.get_world_size(split) == len(mine)
    backend = split._get_backend(dev)
    from torch_openreg.openreg.distributed import ProcessGroupOCCL

    assert isinstance(backend, ProcessGroupOCCL), type(backend)
    t = torch.full((5,), float(rank), device=dev)
    dist.all_reduce(t, group=split)
    same(t, torch.full((5,), float(sum(mine))), "split_group")
    # the parent group still works, and the timeout travelled with the options
    t = torch.ones(2, device=dev)
    dist.all_reduce(t)
    same(t, torch.full((2,), float(world)), "parent after split")
    dist.destroy_process_group()


def ddp_comm_hooks(rank, world):
    """DDP with comm hooks: the built-in allreduce_hook, and bf16 gradient compression."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP

    init(rank, world, device_id=device(rank))
    want = reference(world, torch.optim.SGD, lr=0.1)
    for hook, tolerance in [(default_hooks.allreduce_hook, 1e-5), (default_hooks.bf16_compress_hook, 2e-2)]:
        model = DDP(mlp().to(device(rank)), bucket_cap_mb=0.001)
        model.register_comm_hook(dist.group.WORLD, hook)
        train(model, rank, world, torch.optim.SGD, lr=0.1)
        for (name, p), q in zip(model.module.named_parameters(), want.parameters()):
            torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=tolerance, atol=tolerance,
                                       msg=f"{hook.__name__}: {name}")
    dist.destroy_process_group()


def watchdog(rank, world):
    """An operation that never starts (its stream is busy past twice the timeout) is aborted
    by the watchdog, not waited for forever; the peer fails too."""
    from torch_openreg.openreg.distributed import Options

    init(rank, world, pg_options=Options(timeout=datetime.timedelta(seconds=1)))
    dev = device(rank)
    dist.barrier()
    start = time.monotonic()
    if rank == 0:
        torch.openreg._sleep(4000)  # the stream is busy for 4 s: the all-reduce waits behind it
    try:
        dist.all_reduce(torch.ones(4, device=dev))
        raise AssertionError("all_reduce behind a stuck stream returned")
    except dist.DistBackendError as e:
        if rank == 0:
            assert "occl watchdog" in str(e) and "2.0 s" in str(e), str(e)
    assert time.monotonic() - start < 15
    dist.destroy_process_group()


# ANCHOR: fork
def fork_ranks(scenario, world, logs):
    """Forks the ranks from this process, after torch is imported: its import (seconds of CPU)
    is paid once per scenario, not once per rank. Nothing here has used the device, and must
    not: the runtime refuses a child forked after that, as CUDA's does. Returns the ranks'
    exit codes (negative: killed by that signal)."""
    gc.freeze()  # the import's objects: no rank's collections walk (and copy) them
    pids = []
    for rank in range(world):
        sys.stdout.flush()  # nothing buffered here is written twice
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the rank: its output goes to its log, its exit code is the scenario's
            log = os.open(os.path.join(logs, f"rank{rank}.log"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(log, 1)
            os.dup2(log, 2)
            sys.stdout.reconfigure(line_buffering=True)  # a killed rank's log still shows its last line
            globals()[scenario](rank, world)  # an exception exits 1 with its traceback in the log
            sys.exit(0)
        pids.append(pid)
    return [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in pids]
# ANCHOR_END: fork


if __name__ == "__main__":
    scenario, world, port, logs = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    print(json.dumps(fork_ranks(scenario, world, logs)))
