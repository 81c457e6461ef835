"""Memory a user can see and steer: allocation history and snapshots in the format PyTorch's
viewer reads (torch.cuda._memory_viz), memory pools (MemPool, use_mem_pool, graph capture's
pool), and the allocator's settings from PYTORCH_ALLOC_CONF."""

import base64
import json
import pickle
import re
import subprocess
import sys

import pytest
import torch
from torch.cuda import _memory_viz

memory = torch.openreg.memory
MiB = 1 << 20


@pytest.fixture
def history():
    """Records for one test, and leaves recording off and the trace empty."""
    memory._record_memory_history(enabled="all", context="all", stacks="python", clear_history=True)
    yield
    memory._record_memory_history(enabled=None)


def allocate_here(n):
    return torch.empty(n, dtype=torch.uint8, device="openreg")


def blocks(snapshot):
    return [b for s in snapshot["segments"] for b in s["blocks"]]


def names(frames):
    return [f["name"] for f in frames]


# ANCHOR: history_test
def test_a_snapshot_has_segments_blocks_and_the_trace_with_python_frames(history):
    t = allocate_here(3000)
    u = allocate_here(5000)
    del u
    s = memory._snapshot()
    [block] = [b for b in blocks(s) if b["state"] == "active_allocated" and b["address"] == t.data_ptr()]
    assert block["requested_size"] == 3000 and block["size"] == 3072
    assert names(block["frames"])[0] == "allocate_here"  # innermost first, as CUDA's
    assert block["frames"][0]["filename"] == __file__
    [segment] = [g for g in s["segments"] if g["address"] <= t.data_ptr() < g["address"] + g["total_size"]]
    assert segment["segment_type"] == "small" and segment["device"] == 0
    assert segment["allocated_size"] >= 3072 and segment["total_size"] == 2 * MiB
    actions = [e["action"] for e in s["device_traces"][0]]
    assert actions.count("alloc") == 2 and "free_requested" in actions and "free_completed" in actions
    assert len(s["device_traces"]) == torch.openreg.device_count()
    # stacks="python": no C++ frame
    assert all(not f["filename"].endswith(".so") for b in blocks(s) for f in b["frames"])
# ANCHOR_END: history_test


def test_cpp_frames_when_stacks_is_all():
    memory._record_memory_history(stacks="all", clear_history=True)
    try:
        t = allocate_here(700)
        [block] = [b for b in blocks(memory._snapshot()) if b["address"] == t.data_ptr()]
        frames = names(block["frames"])
        assert "allocate_here" in frames and any("empty" in n for n in frames), frames
    finally:
        memory._record_memory_history(enabled=None)


def test_max_entries_keeps_the_last_events_and_state_keeps_no_trace():
    memory._record_memory_history(max_entries=3, clear_history=True)
    try:
        for n in range(5):
            allocate_here(1000 + n)
        trace = memory._snapshot()["device_traces"][0]
        assert len(trace) == 3
        memory._record_memory_history(enabled="state", clear_history=True)
        t = allocate_here(900)
        s = memory._snapshot()
        assert s["device_traces"][0] == []
        [block] = [b for b in blocks(s) if b["address"] == t.data_ptr()]
        assert "test_max_entries_keeps_the_last_events_and_state_keeps_no_trace" in names(block["frames"])
    finally:
        memory._record_memory_history(enabled=None)
    assert memory._snapshot()["device_traces"][0] == []
    assert all(b["frames"] == [] for b in blocks(memory._snapshot()))


@pytest.mark.parametrize("kwargs, named", [
    ({"enabled": "everything"}, "enabled"),
    ({"context": "some"}, "context"),
    ({"stacks": "cpp"}, "stacks"),
    ({"max_entries": 0}, "max_entries"),
    ({"device": "openreg:7"}, "7"),
])
def test_bad_arguments_name_the_value(kwargs, named):
    with pytest.raises((ValueError, RuntimeError), match=named):
        memory._record_memory_history(**kwargs)


def test_dump_snapshot_pickles_what_the_viewer_reads(history, tmp_path):
    t = allocate_here(2048)
    path = tmp_path / "snapshot.pickle"
    memory._dump_snapshot(str(path))
    with open(path, "rb") as f:
        loaded = pickle.load(f)
    assert any(b["address"] == t.data_ptr() for b in blocks(loaded))
    assert "allocated" in _memory_viz.segsum(loaded)


def test_out_of_memory_says_how_to_see_what_holds_the_memory(history):
    with pytest.raises(torch.OutOfMemoryError, match=r"_record_memory_history\(\).*_dump_snapshot"):
        torch.empty(1 << 45, dtype=torch.uint8, device="openreg")
    [oom] = [e for e in memory._snapshot()["device_traces"][0] if e["action"] == "oom"]
    assert oom["size"] == 1 << 45 and oom["device_free"] > 0


# ANCHOR: viewer_test
def viewer_snapshot(html):
    """The snapshot PyTorch's viewer page embeds (base64 of the pickle)."""
    files = json.loads(re.search(r"const local_files = (\[.*?\])\n", html).group(1))
    return pickle.loads(base64.b64decode(files[0]["base64"]))


def test_the_viewer_renders_a_model_step_and_shows_the_models_allocations(history):
    from test_zoo import LANGUAGE, batch_for, train_step

    torch.manual_seed(0)
    train_step(LANGUAGE["gpt2"](), batch_for("gpt2"), "openreg")  # the zoo's gpt2, one SGD step
    snapshot = memory._snapshot()
    for plot in (_memory_viz.trace_plot, _memory_viz.segment_plot):
        html = plot(snapshot)
        assert "MemoryViz.js" in html
        shown = viewer_snapshot(html)
        frames = [f for e in shown["device_traces"][0] if e["action"] == "alloc" for f in e["frames"]]
        # Activations allocated by the model's own code: transformers' modeling_gpt2.py.
        gpt2 = {f["name"] for f in frames if f["filename"].endswith("modeling_gpt2.py")}
        assert {"forward"} <= gpt2, gpt2
        assert any(f["name"] == "train_step" for f in frames)
    text = _memory_viz.trace(snapshot)
    assert "del " in text and "# free completed for" in text  # the viewer's words for the frees
# ANCHOR_END: viewer_test


def test_the_profiler_memory_timeline_of_the_same_step():
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)).to("openreg")
    x = torch.randn(32, 64, device="openreg")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True,
                                record_shapes=True, with_stack=True) as prof:
        model(x).sum().backward()
    html = _memory_viz.profile_plot(prof)
    shown = viewer_snapshot(html)
    sizes = {e["size"] for trace in shown["device_traces"] for e in trace if e["action"] == "alloc"}
    assert 32 * 256 * 4 in sizes  # the hidden activation


# Memory pools.

def pool_bytes(pool):
    return pool.memory_stats()["reserved_bytes"]


# ANCHOR: pool_test
def test_a_pool_keeps_its_blocks_to_itself_and_reuses_them():
    pool = torch.openreg.MemPool()
    with torch.openreg.use_mem_pool(pool):
        a = allocate_here(4096)
    assert pool.memory_stats()["allocated_bytes"] == 4096 and pool_bytes(pool) == 2 * MiB
    address = a.data_ptr()
    del a
    b = allocate_here(4096)  # outside the pool: not the pool's free block
    assert b.data_ptr() != address
    with torch.openreg.use_mem_pool(pool):
        c = allocate_here(4096)  # inside: the pool's block again
    assert c.data_ptr() == address
    assert pool.memory_stats()["allocated_blocks"] == 1
    snapshot = pool.snapshot()
    assert {s["segment_pool_id"] for s in snapshot["segments"]} == {pool.id}
# ANCHOR_END: pool_test


def test_a_pool_outlives_its_tensors_and_tensors_outlive_their_pool():
    torch.openreg.memory.empty_cache()
    pool = torch.openreg.MemPool()
    with torch.openreg.use_mem_pool(pool):
        t = torch.arange(1000, device="openreg", dtype=torch.float32)
        u = allocate_here(12 * MiB)
    del u
    assert pool_bytes(pool) > 12 * MiB  # the pool keeps its freed blocks cached
    reserved = torch.openreg.memory_reserved()
    pool_id = pool.id[1]
    del pool  # t still holds a block: the pool's free segments go, t's stays
    assert torch.openreg.memory_reserved() < reserved
    assert t.sum().item() == sum(range(1000))
    before = torch.openreg.memory_reserved()
    del t
    assert torch.openreg.memory_reserved() == before - 2 * MiB
    with pytest.raises(ValueError, match=f"MemPool \\(0, {pool_id}\\) does not exist"):
        torch_openreg_C()._mem_pool_stats(pool_id)


def torch_openreg_C():
    import torch_openreg._C as C

    return C


def test_use_count_and_nesting():
    outer, inner = torch.openreg.MemPool(), torch.openreg.MemPool()
    assert outer.use_count() == 1
    with torch.openreg.use_mem_pool(outer):
        assert outer.use_count() == 2
        with torch.openreg.use_mem_pool(inner):
            a = allocate_here(1000)
        b = allocate_here(1000)
    assert inner.memory_stats()["allocated_blocks"] == 1 and outer.memory_stats()["allocated_blocks"] == 1
    assert outer.use_count() == 1
    del a, b


def test_graph_capture_allocates_from_a_shared_pool():
    pool = torch.openreg.MemPool()
    side = torch.Stream(device="openreg")
    x = torch.ones(1000, device="openreg")
    graphs, outs = [], []
    for factor in (2, 3):
        g = torch.accelerator.Graph(pool=pool.id)
        with side:
            g.capture_begin()
            outs.append(x * factor)
            g.capture_end()
        graphs.append(g)
        assert g.pool() == pool.id
    assert pool.use_count() == 3  # the object and two graphs
    assert pool.memory_stats()["allocated_blocks"] == 2
    for g in graphs:
        g.replay()
    torch.accelerator.synchronize()
    assert outs[0].cpu()[0] == 2 and outs[1].cpu()[0] == 3
    graphs[0].reset()
    assert pool.use_count() == 2


def test_a_graphs_private_pool_is_a_mem_pool():
    side = torch.Stream(device="openreg")
    x = torch.ones(10, device="openreg")
    g = torch.accelerator.Graph()
    with side:
        g.capture_begin()
        y = x + 1
        g.capture_end()
    _, pool_id = g.pool()
    device, references = torch_openreg_C()._mem_pool_info(pool_id)
    assert (device, references) == (0, 1)
    assert torch_openreg_C()._mem_pool_stats(pool_id)["allocated_blocks"] == 1
    del y


def test_misuse_is_an_error():
    pool = torch.openreg.MemPool(device="openreg:0")
    with pytest.raises(ValueError, match=r"belongs to openreg:0; it cannot serve allocations on openreg:1"):
        with torch.openreg.use_mem_pool(pool, device="openreg:1"):
            pass
    with pytest.raises(TypeError, match="expected a torch.openreg.MemPool, got tuple"):
        with torch.openreg.use_mem_pool(pool.id):
            pass
    with pytest.raises(NotImplementedError, match=r"MemPool\(allocator=...\) is not supported on openreg"):
        torch.openreg.MemPool(allocator=object())
    C = torch_openreg_C()
    with pytest.raises(ValueError, match="use_mem_pool blocks end innermost first"):
        C._end_allocate_to_pool(0, pool.id[1])
    # Dropping the pool while a block uses it: the block holds a reference, and the pool serves it.
    with torch.openreg.use_mem_pool(pool):
        pool_id = pool.id[1]
        del pool
        t = allocate_here(1000)
        assert C._mem_pool_stats(pool_id)["allocated_blocks"] == 1
    del t
    with pytest.raises(ValueError, match="does not exist"):
        C._mem_pool_info(pool_id)


# PYTORCH_ALLOC_CONF.

@pytest.fixture
def settings():
    """Applies settings for one test (as PYTORCH_ALLOC_CONF would at start), then restores
    the defaults; each starts from an empty cache."""
    def apply(conf):
        torch.openreg.memory.empty_cache()
        torch._C._accelerator_setAllocatorSettings(conf)
    yield apply
    torch._C._accelerator_setAllocatorSettings(DEFAULTS)
    torch.openreg.memory.empty_cache()


# c10 keeps a key's value until the key is given again. These are the defaults, but for the
# threshold, which cannot be set back to 0 (off): at 0.99999 it acts only next to an OOM.
DEFAULTS = ("max_split_size_mb:16777216,garbage_collection_threshold:0.99999,large_segment_size_mb:20,"
            "roundup_power2_divisions:1,openreg_parked_blocks:64")


def reserved():
    return torch.openreg.memory_reserved()


# ANCHOR: settings_test
def test_max_split_size_keeps_large_blocks_whole(settings):
    def grows():
        big = allocate_here(30 * MiB)
        del big
        before = reserved()
        small = allocate_here(22 * MiB)  # fits in the freed 30 MiB block
        grown = reserved() - before
        del small
        return grown

    settings("openreg_parked_blocks:64")
    assert grows() == 0  # the 30 MiB block is split
    settings("max_split_size_mb:25")
    assert grows() == 22 * MiB  # not split: a segment of its own


def test_garbage_collection_threshold_returns_free_segments_first(settings):
    capacity = torch.openreg.get_device_properties(0).total_memory

    def growth():
        base = reserved()
        a = allocate_here(30 * MiB)
        del a
        b = allocate_here(40 * MiB)  # no fit: a new segment
        grown = reserved() - base
        del b
        return grown

    settings("openreg_parked_blocks:64")
    assert growth() == 70 * MiB
    torch.openreg.memory.empty_cache()
    settings(f"garbage_collection_threshold:{(reserved() + 50 * MiB) / capacity:.12f}")
    assert growth() == 40 * MiB  # the free 30 MiB segment went back first


def test_roundup_power2_divisions_rounds_requests(settings):
    def block_size():
        base = torch.openreg.memory_allocated()
        t = allocate_here(1_300_000)
        size = torch.openreg.memory_allocated() - base
        del t
        return size

    settings("roundup_power2_divisions:1")
    assert block_size() == 1_300_480  # a multiple of 512
    settings("roundup_power2_divisions:4")
    assert block_size() == 1_310_720  # 1 MiB to 2 MiB in four steps of 256 KiB


def test_large_segment_size_sets_how_the_large_pool_grows(settings):
    for mb in (20, 12):
        settings(f"large_segment_size_mb:{mb}")
        base = reserved()
        t = allocate_here(3 * MiB)
        assert reserved() - base == mb * MiB
        del t


def test_parked_blocks_of_zero_merges_freed_blocks_at_once(settings):
    def second_address():
        fresh = torch_openreg_C()._runtime_new_stream(0, 0)  # never used: empty free lists
        with torch.openreg.ExternalStream(fresh):
            a = allocate_here(1000)
            first = a.data_ptr()
            del a
            b = allocate_here(1500)  # another size: a parked block is not merged for it
            same = b.data_ptr() == first
            del b
        return same

    settings("openreg_parked_blocks:64")
    assert not second_address()
    settings("openreg_parked_blocks:0")
    assert second_address()
# ANCHOR_END: settings_test


@pytest.mark.parametrize("conf, message", [
    ("openreg_parked_blocks:many", "openreg_parked_blocks must be a count from 0 to 4096, got 'many'"),
    ("openreg_parked_blocks:5000", "openreg_parked_blocks must be a count from 0 to 4096, got '5000'"),
    ("openreg_parked", "Unrecognized key 'openreg_parked'"),
    ("garbage_collection_threshold:1.5", "garbage_collect_threshold is invalid"),
])
def test_a_bad_key_or_value_is_a_value_error_naming_it(conf, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        torch._C._accelerator_setAllocatorSettings(conf)


@pytest.mark.parametrize("conf, effect", [
    ("openreg_parked_blocks:0,max_split_size_mb:25", "ok"),
    ("openreg_parked_blocks:x", "openreg_parked_blocks must be a count from 0 to 4096, got 'x'"),
    ("no_such_key:1", "Unrecognized key 'no_such_key'"),
])
def test_the_environment_variable_is_read_at_start(conf, effect):
    code = "import torch; torch.ones(1, device='openreg'); print(torch._C._accelerator_getAllocatorSettings())"
    run = subprocess.run([sys.executable, "-c", code], env={**__import__("os").environ, "PYTORCH_ALLOC_CONF": conf},
                         capture_output=True, text=True, timeout=120)
    if effect == "ok":
        assert run.returncode == 0 and conf in run.stdout, run.stderr
    else:
        assert run.returncode != 0 and effect in run.stderr
        assert "frame #0" not in run.stderr.split("ImportError", 1)[1]  # the message, not a C++ backtrace


def test_empty_cache_keeps_a_live_pools_memory_for_the_graph_that_replays_into_it():
    side = torch.Stream(device="openreg")
    x = torch.ones(1 << 16, device="openreg")
    z = torch.empty(1 << 16, device="openreg")
    g = torch.accelerator.Graph()
    with side:
        g.capture_begin()
        z.copy_(x * 2)  # x * 2 lives in the pool and is freed inside the capture
        g.capture_end()
    torch.openreg.memory.empty_cache()  # the pool's segment is wholly free, and must stay
    junk = [torch.full((1 << 16,), 7.0, device="openreg") for _ in range(16)]  # would take its memory
    g.replay()
    torch.accelerator.synchronize()
    assert (z == 2).all().item()
    assert all((j == 7.0).all().item() for j in junk)
