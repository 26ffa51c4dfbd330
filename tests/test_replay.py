"""The steady relaunch (docs/device.md, "The steady relaunch"): a launch whose timing is kept replays its
instance's recorded path as one function (``npu/replay.py``). Every launch of the gallery, the Triton tutorials,
random kernels and the torch models of the test suite is launched four times on a device that replays (timed,
recorded, then replayed twice) and on one that never does (``Device(replay=False)``) and, for kernels, on the
sequential device; the last launch runs on new data. Records (cycles, bytes, instructions, pipe times, L2),
outputs and faults must be the same bits."""

from __future__ import annotations

import contextlib
import importlib
import io
import re
import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import dvmlang.npu.replay as replay_mod
from dvmlang.errors import DvmError, DvmWarning
from dvmlang.npu.device import Device
from fuzzing import budget
from test_timing_cache import (EXAMPLES, TUTORIALS, _captured, _copies, _record, random_control_flow_launch,
                               random_expression_launch)

RUNS = 4  # timed, recorded, replayed, replayed on new data


class _Count:
    def __init__(self, monkeypatch):
        self.n = 0
        run = replay_mod.run

        def counted(*a):
            self.n += 1
            return run(*a)
        monkeypatch.setattr(replay_mod, "run", counted)


def _sources(monkeypatch, replays: bool = False) -> list:
    """The source of every replay generated from now on (``Replay.source``), in order (``replays``: the replays)."""
    sources = []
    generate = replay_mod.generate

    def kept(*a):
        rp = generate(*a)
        if rp is not None:
            sources.append(rp if replays else rp.source)
        return rp
    monkeypatch.setattr(replay_mod, "generate", kept)
    return sources


def _launched(monkeypatch, launch):
    """The bytecode instance ``launch()`` runs on its device (its first ``Device.run``)."""
    seen = []
    run = Device.run

    def capture(self, bc, arrays, **kw):
        seen.append(bc)
        return run(self, bc, arrays, **kw)
    monkeypatch.setattr(Device, "run", capture)
    launch()
    monkeypatch.setattr(Device, "run", run)  # (the test's other patches stay)
    return seen[0]


def _new_data(arrays: dict, seed: int) -> dict:
    """``arrays`` with new values in their float tensors (the same shapes; integer tensors, indices, unchanged)."""
    rng = np.random.default_rng(seed)
    for a in arrays.values():
        if a.dtype.kind == "f" and a.flags.writeable and a.size:
            a[...] = rng.standard_normal(a.shape).astype(a.dtype)
    return arrays


def _outcome(fn):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DvmWarning)
            rec, outs = fn()
    except DvmError as e:
        return ("fault", type(e).__name__, str(e))
    return _record(rec), [o.tobytes() for o in outs]


def _replayed_and_not(launch) -> list:
    """``launch(device, i)``'s outcomes for i in 0..RUNS on a replaying device, which must equal those on a device
    that never replays."""
    got = []
    for replay in (True, False):
        dev = Device(replay=replay)
        got.append([launch(dev, i) for i in range(RUNS + 1)])
    assert got[0] == got[1]
    return got[0]


def _cycles_and_outputs(outcome):
    return outcome if outcome[0] == "fault" else (outcome[0][0], outcome[1])


def _compare(run, oracle: bool = False):
    """``run(device, last)`` launches once (``last``: on new data); the launches compared with those of a device
    that never replays (records, outputs and faults) and, with ``oracle``, of the sequential device (cycles, outputs
    and faults: it counts instructions per program). (The gallery's kernels with atomics sum in another order on
    the sequential device, before any replay: there the full path is the reference.)"""
    results = []
    for dev in (Device(replay=True), Device(replay=False)) + ((Device(sequential=True),) if oracle else ()):
        results.append([_outcome(lambda: run(dev, i == RUNS - 1)) for i in range(RUNS)])
    assert results[0] == results[1], "a replayed launch differs from the full path's"
    if oracle:
        assert [_cycles_and_outputs(o) for o in results[0]] == [_cycles_and_outputs(o) for o in results[2]], \
            "a replayed launch differs from the sequential device's"


def _kernel(bc, arrays, alias, name, oracle=False):
    def run(dev, last):
        a = _copies(arrays)
        if last:
            _new_data(a, 1)
        return dev.run(bc, a, name=name, alias_groups=alias), list(a.values())
    _compare(run, oracle)


def _stack(stages, name):
    def run(dev, last):
        roots: dict = {}
        copied = [[(bc, _copies(arrays, roots), kname, alias) for bc, arrays, kname, alias in stage]
                  for stage in stages]
        if last:
            for stage in copied:
                for _, arrays, _, _ in stage:
                    _new_data(arrays, 2)
        rec = dev.run_stack(copied, name=name)
        return rec, [a for stage in copied for _, arrays, _, _ in stage for a in arrays.values()]
    _compare(run)


@pytest.mark.parametrize("name", EXAMPLES + TUTORIALS)
def test_replayed_gallery_launches_are_the_full_paths(name, monkeypatch):
    launches = _captured(name, monkeypatch)
    assert launches
    with contextlib.redirect_stdout(io.StringIO()):
        for kind, args in launches[:12]:
            (_kernel if kind == "kernel" else _stack)(*args)


def test_most_gallery_launches_are_replayed(monkeypatch):
    """Not vacuous: the device replays most of the gallery's relaunches."""
    launches = []
    for name in ("vector_add", "softmax", "matmul", "layernorm", "graph_block", "flash_attention"):
        launches += _captured(name, monkeypatch)[:6]
    count = _Count(monkeypatch)
    with contextlib.redirect_stdout(io.StringIO()):
        for kind, args in launches:
            (_kernel if kind == "kernel" else _stack)(*args)
    # each launch replays twice on the replaying device (a stack: once per kernel)
    assert count.n >= 0.8 * 2 * len(launches), (count.n, len(launches))


@budget(15)
@given(seed=st.integers(0, 2**31))
def test_replayed_random_expression_kernels_are_the_full_paths(seed):
    _kernel(*random_expression_launch(seed), None, None, oracle=True)


@budget(40)
@given(data=st.data())
def test_replayed_random_control_flow_kernels_are_the_full_paths(data):
    _kernel(*random_control_flow_launch(data), None, None, oracle=True)


def test_a_kernel_with_a_loaded_register_is_not_replayed(monkeypatch):
    """Collatz reads its loop's bound from memory: its launches are never replayed (nor timed once)."""
    from test_device_budget import collatz
    count = _Count(monkeypatch)
    dev = Device()
    x = np.array([3, 7, 27, 1], np.int32)
    for _ in range(3):
        collatz[(4,)](x, np.zeros(4, np.int32), device=dev)
    assert count.n == 0


def test_a_replay_stops_where_the_budget_ends():
    """A budget the path would exceed: the launch runs step by step and stops where the full path stops."""
    from test_timing_cache import ROOT  # noqa: F401  (the gallery's kernels)
    import dvmlang
    import dvmlang.language as dl

    @dvmlang.kernel
    def loop(x, out, n, BLOCK: dl.constexpr):
        acc = dl.zeros((BLOCK,), dl.float32)
        for i in range(n):
            acc += dl.load(x + dl.arange(0, BLOCK))
        dl.store(out + dl.arange(0, BLOCK), acc)

    x = np.arange(16, dtype=np.float32)
    errors = []
    for replay in (True, False):
        dev = Device(replay=replay)
        out = np.zeros(16, np.float32)
        for _ in range(3):
            loop[(1,)](x, out, 40, BLOCK=16, device=dev)
        small = Device(replay=replay, watchdog=60)
        small_out = np.zeros(16, np.float32)
        try:
            for _ in range(3):
                loop[(1,)](x, small_out, 40, BLOCK=16, device=small)
        except DvmError as e:
            errors.append((type(e).__name__, str(e)))
        assert out.tolist() == (x * 40).tolist()
    assert len(errors) == 2 and errors[0] == errors[1]


# ---- the torch models of the test suite -----------------------------------------------------------------------

def _models():
    torch = pytest.importorskip("torch")
    from test_torch_blocks import CASES
    from test_torch_compile import _Block
    torch.manual_seed(0)
    out = {"mlp": (torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.GELU(), torch.nn.Linear(64, 8)).eval(),
                   lambda: (torch.randn(5, 16),)),
           "norm_gelu_silu_block": (_Block().eval(), lambda: (torch.randn(2, 6, 32),))}
    torch.backends.mha.set_fastpath_enabled(False)
    mha = torch.nn.MultiheadAttention(32, 4, batch_first=True).eval()
    out["multihead_attention"] = (lambda a: mha(a, a, a)[0], lambda: (torch.randn(2, 5, 32),))
    out["transformer_encoder_layer"] = (torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0,
                                                                         batch_first=True).eval(),
                                        lambda: (torch.randn(2, 5, 32),))
    for name, (f, args, _) in CASES.items():
        out[name] = (f, lambda args=args: tuple(a * (1 + torch.rand(()).item()) if a.is_floating_point() else a
                                                for a in args))
    from transformers import LlamaConfig, LlamaForCausalLM
    llama = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                         use_cache=False)).eval()
    out["llama_tiny"] = (lambda ids: llama(ids).logits, lambda: (torch.randint(0, 64, (1, 9)),))
    return out


def compiled_calls(f, inputs, replay: bool) -> list:
    """Per call of ``torch.compile(f, backend="dvmlang")`` on a device that replays (or never does), its outputs'
    bytes and every launch's record."""
    import torch
    tst = importlib.import_module("dvmlang.torch.stats")  # (the package's ``stats`` is a function)
    torch._dynamo.reset()
    got = []
    with Device(replay=replay):
        c = torch.compile(f, backend="dvmlang")
        with torch.no_grad():
            for args in inputs:
                tst.LAST_LAUNCHES.clear()
                out = c(*args)
                outs = out if isinstance(out, tuple) else (out,)
                got.append(([o.detach().numpy().tobytes() for o in outs], [_record(r) for r in tst.LAST_LAUNCHES]))
    return got


@pytest.mark.parametrize("name", ["mlp", "norm_gelu_silu_block", "multihead_attention", "transformer_encoder_layer",
                                  "llama_tiny", "softmaxes_max_var", "sdpa_causal_and_bool_mask",
                                  "cumsum_flip_pad_tril", "embedding_index_select_gather", "rotary_chunk_split",
                                  "norms_linear_activations"])
def test_replayed_models_are_the_full_paths(name, monkeypatch):
    torch = pytest.importorskip("torch")
    f, make = _models()[name]
    torch.manual_seed(1)
    inputs = [make() for _ in range(RUNS + 1)]
    count = _Count(monkeypatch)
    results = [compiled_calls(f, inputs, replay) for replay in (True, False)]
    assert count.n > 0, "nothing was replayed"
    assert results[0] == results[1], "a replayed model call differs from the full path's"


@pytest.mark.parametrize("rows", [1, 3, 40])
def test_an_index_out_of_range_in_a_replayed_gather_faults_as_the_full_path(rows, monkeypatch):
    """A gather's index bounds check tests a value from memory (its other way traps): the replay tests it as the
    step-by-step path does. A launch whose indices go out of range on a replayed launch fails with the same error
    (the programs that trap, their line), in one program and in batches where some programs trap."""
    import dvmlang
    import dvmlang.ops as ops

    count = _Count(monkeypatch)
    outcomes = []
    for replay in (True, False):
        dev = Device(replay=replay)

        @dvmlang.graph(device=dev)
        def pick(x, idx):
            return ops.gather(x, 1, idx) * 2.0

        x = np.arange(rows * 16, dtype=np.float32).reshape(rows, 16)
        good = np.tile(np.arange(8, dtype=np.int32)[::-1], (rows, 1))
        got = []
        for _ in range(3):
            got.append(pick(x, good).tobytes())
        bad = good.copy()
        bad[rows // 2, 3] = 99
        try:
            pick(x, bad)
            got.append("no fault")
        except DvmError as e:
            got.append((type(e).__name__, str(e)))
        got.append(pick(x, good).tobytes())
        outcomes.append(got)
    assert outcomes[0] == outcomes[1]
    assert outcomes[0][3] != "no fault"
    assert count.n >= 2, "the gather was not replayed"


@pytest.mark.parametrize("masked,dtype", [(False, "float32"), (True, "float32"), (True, "int32"), (False, "float16")])
def test_a_replayed_gather_gives_the_steps_tile_and_its_fault(masked, dtype, monkeypatch):
    """A gather of indices loaded from memory (no index check in the kernel: the step's own bounds check guards
    it) held as a local variable by the replay: in range, masked or not, the step's tile (the mask's lanes the
    padding); an index out of range on a replayed launch, in a lane the mask keeps, the step's own MemoryFault
    (program, tensor, elements); one in a lane the mask drops, no fault. Against ``Device(replay=False)``, on new
    data at every launch, for tables of three dtypes; the path's source computes the gather itself."""
    import dvmlang
    import dvmlang.language as dl

    @dvmlang.kernel
    def pick(x_ptr, idx_ptr, y_ptr, n, BLOCK: dl.constexpr, MASKED: dl.constexpr):
        offs = dl.program_id(0) * BLOCK + dl.arange(0, BLOCK)
        i = dl.load(idx_ptr + offs)
        if MASKED:
            v = dl.load(x_ptr + i, mask=offs < n, other=-5.0)
        else:
            v = dl.load(x_ptr + i)
        dl.store(y_ptr + offs, v * 2.0 + 1.0)

    def launch(dev, k):
        rng = np.random.default_rng(k)
        x = (rng.standard_normal(40) * 50).astype(dtype)
        idx = rng.integers(0, 40, 32).astype(np.int32)
        n = 32 - 3 * masked
        if k == RUNS - 2:  # out of range: in a lane the mask keeps, then (masked) in one it drops
            idx[5] = 40 + k
        if masked and k == RUNS - 1:
            idx[31] = -7
        y = np.zeros(32, np.float32)
        try:
            pick[(2,)](x, idx, y, n, BLOCK=16, MASKED=masked, device=dev)
        except DvmError as e:
            return type(e).__name__, str(e)
        return y.tobytes()

    sources = _sources(monkeypatch)
    got = _replayed_and_not(launch)
    assert "MemoryFault" in got[RUNS - 2][0]
    assert isinstance(got[RUNS - 1], bytes)
    assert any("GA" in src for src in sources), "the gather was not held by a replay"


def test_a_replayed_load_read_after_a_store_to_its_place_keeps_the_loaded_values(monkeypatch):
    """A program loads a tile, stores to the same place and reads the load again (``a`` below): a replay that
    keeps the loaded tile as a local variable (a view of global memory, for a small batch) must give it the
    values the load read, as the step-by-step path does, on every relaunch and on new data."""
    import dvmlang
    import dvmlang.language as dl

    @dvmlang.kernel
    def overwrite(x_ptr, y_ptr, BLOCK: dl.constexpr):
        offs = dl.arange(0, BLOCK)
        a = dl.load(x_ptr + offs)
        dl.store(x_ptr + offs, a * 0.0 + 7.0)
        b = dl.load(x_ptr + offs)
        dl.store(y_ptr + offs, a * 2.0 + b)

    def launch(dev, i):
        x = np.arange(16, dtype=np.float32) + i
        y = np.zeros(16, np.float32)
        overwrite[(1,)](x, y, BLOCK=16, device=dev)
        np.testing.assert_array_equal(y, 2 * (np.arange(16, dtype=np.float32) + i) + 7)
        return x.tobytes(), y.tobytes()

    count = _Count(monkeypatch)
    _replayed_and_not(launch)
    assert count.n > 0, "nothing was replayed"


def test_replayed_transfers_straight_to_the_tensors_take_the_step_on_another_size(monkeypatch):
    """A replay reads a load's box and writes a store's box straight from and into the tensor (one view of it) when
    the tensor has the size the descriptor was checked for; on a tensor of another size (the same instance) the
    step runs and checks the box again: a larger tensor gives the full path's results, a smaller one its
    MemoryFault, and the next launch at the first size is replayed again with the same bits. Records, outputs
    and faults against ``Device(replay=False)``, and the path's source holds the direct transfers."""
    import dvmlang
    import dvmlang.language as dl

    @dvmlang.kernel
    def scale(x_ptr, y_ptr, BLOCK: dl.constexpr):
        offs = dl.program_id(0) * BLOCK + dl.arange(0, BLOCK)
        a = dl.load(x_ptr + offs)
        dl.store(y_ptr + offs, a * 3.0 + 1.0)

    sources = _sources(monkeypatch, replays=True)  # (the first launch, timed, records its path as it runs)
    bc = _launched(monkeypatch, lambda: scale[(4,)](np.zeros(64, np.float32), np.zeros(64, np.float32), BLOCK=16,
                                                    device=Device()))
    count = _Count(monkeypatch)
    sizes = [64, 64, 64, 64, 96, 64, 48, 64, 64]
    got = {}
    for replay in (True, False):
        dev = Device(replay=replay)
        outs = []
        for i, n in enumerate(sizes):
            x = (np.arange(n, dtype=np.float32) * 0.5 + i).astype(np.float32)
            y = np.full(n, -1.0, np.float32)
            outs.append(_outcome(lambda: (dev.run(bc, {0: x, 1: y}, name="scale"), [x, y])))
        got[replay] = outs
    assert got[True] == got[False]
    assert got[True][6][0] == "fault" and got[True][6][1] == "MemoryFault"
    assert got[True][4][0] != "fault"
    assert count.n >= 4, "the launches were not replayed"
    assert sources and _checked_sizes(sources[0], 0) == [64] and _checked_sizes(sources[0], 1) == [64], \
        "the transfers were not written straight to the tensors"


def test_instances_whose_paths_are_alike_share_the_replays_code(monkeypatch):
    """Two instances of one kernel at other sizes (grids and tensors) whose programs take the same steps write the
    same source (every size a name of the replay's globals), compiled once: each replay checks its own sizes and
    gives its own instance's results (against numpy), and a replay of another kernel has code of its own."""
    import dvmlang
    import dvmlang.language as dl

    def make(name):
        def body(x_ptr, y_ptr, BLOCK: dl.constexpr):
            offs = dl.program_id(0) * BLOCK + dl.arange(0, BLOCK)
            dl.store(y_ptr + offs, dl.load(x_ptr + offs) * 3.0 + 1.0)
        body.__name__ = body.__qualname__ = name
        return dvmlang.kernel(body)

    replays = _sources(monkeypatch, replays=True)
    dev = Device()
    for kern, n in ((make("scale"), 64), (make("scale"), 128), (make("scale_too"), 64)):
        for i in range(4):  # (the first instance recorded as it is timed, the second at its second launch)
            x = np.arange(n, dtype=np.float32) * 0.25 + i
            y = np.full(n, -1.0, np.float32)
            kern[(n // 16,)](x, y, BLOCK=16, device=dev)
            np.testing.assert_array_equal(y, x * np.float32(3.0) + np.float32(1.0))
    assert len(replays) == 3
    a, b, other = replays
    assert a.source == b.source and a.fn.__code__ is b.fn.__code__
    assert _checked_sizes(a, 0) == [64] and _checked_sizes(b, 0) == [128]
    assert other.fn.__code__ is not a.fn.__code__ and "scale_too" in other.fn.__code__.co_filename


def _checked_sizes(rp, t: int) -> list:
    """The sizes a replay's source compares tensor ``t``'s with before a transfer straight to it (names of the
    replay's globals: the source is alike for instances of other sizes)."""
    names = re.findall(rf"\(g := L\.arrays\[{t}\]\)\.size == (\w+)", rp.source)
    return [rp.fn.__globals__[n] for n in names]


@pytest.mark.parametrize("other", [None, 2.5])
def test_a_replayed_partial_box_is_put_in_the_padding_as_the_full_path_puts_it(other, monkeypatch):
    """A masked load whose box is part of its tile (10 of 16 elements) is read straight from the tensor by a replay
    and put in a copy of the padding (``other``, or the zeros a load without one gets): the same bits as the full
    path's on every relaunch and on new data."""
    import dvmlang
    import dvmlang.language as dl

    @dvmlang.kernel
    def zeros(x_ptr, y_ptr, n, BLOCK: dl.constexpr):
        offs = dl.arange(0, BLOCK)
        a = dl.load(x_ptr + offs, mask=offs < n)
        s = dl.sum(a * a, axis=0)
        dl.store(y_ptr + offs, a + s, mask=offs < n)

    @dvmlang.kernel
    def padded(x_ptr, y_ptr, n, BLOCK: dl.constexpr):
        offs = dl.arange(0, BLOCK)
        a = dl.load(x_ptr + offs, mask=offs < n, other=2.5)
        s = dl.sum(a * a, axis=0)
        dl.store(y_ptr + offs, a + s, mask=offs < n)

    part = zeros if other is None else padded
    sources = _sources(monkeypatch)
    def launch(dev, i):
        x = np.arange(10, dtype=np.float32) * 0.25 - i
        y = np.zeros(10, np.float32)
        part[(1,)](x, y, 10, BLOCK=16, device=dev)
        pad = 0.0 if other is None else other
        np.testing.assert_allclose(y, x + ((x * x).sum() + 6 * pad * pad), rtol=1e-6)
        return y.tobytes()

    count = _Count(monkeypatch)
    _replayed_and_not(launch)
    assert count.n > 0, "nothing was replayed"
    assert any("put(PAD" in x for x in sources), "the partial box was not read straight from the tensor"


def test_a_replay_computes_what_reads_no_loaded_value_once(monkeypatch):
    """Tile values computed only from the instance (an index tile, a size argument, numbers: the masks and the
    index arithmetic of a kernel) are computed when the replay is written, not at every launch; their readers get
    the same arrays, so relaunches, new data and another size (another instance) give the full path's bits."""
    import dvmlang
    import dvmlang.language as dl

    @dvmlang.kernel
    def masked(x_ptr, y_ptr, n, BLOCK: dl.constexpr):
        offs = dl.arange(0, BLOCK)
        keep = (offs < n) & (offs % 3 != 0)
        a = dl.load(x_ptr + offs, mask=offs < n, other=0.0)
        b = dl.where(keep, a * 2.0, offs.to(dl.float32) - 1.0)
        dl.store(y_ptr + offs, b + dl.max(b, axis=0), mask=offs < n)

    sources = _sources(monkeypatch)

    def launch(dev, i):
        n = 10 if i < 3 else 7
        x = np.arange(n, dtype=np.float32) * 0.25 - i
        y = np.zeros(n, np.float32)
        masked[(1,)](x, y, n, BLOCK=16, device=dev)
        idx = np.arange(16)
        a = np.concatenate([x, np.zeros(16 - n, np.float32)])
        b = np.where((idx < n) & (idx % 3 != 0), a * 2, idx - 1.0).astype(np.float32)
        np.testing.assert_allclose(y, (b + b.max())[:n], rtol=1e-6)
        return y.tobytes()

    count = _Count(monkeypatch)
    _replayed_and_not(launch)
    assert count.n > 0, "nothing was replayed"
    assert any(" = KF" in x for x in sources), "nothing was computed when the replay was written"


def test_programs_whose_paths_part_are_replayed_in_groups(monkeypatch):
    """A persistent loop over more virtual programs than programs (not a multiple): some programs take one more
    trip, so the batch parts at the loop's test. Its groups are recorded one launch at a time and replayed each
    on a batch of its own (``replay.Parts``): records and outputs are those of the full path and the sequential
    device, on new data too."""
    import dvmlang
    import dvmlang.ops as ops
    parts = []
    run = replay_mod.run

    def counted(rp, b, L):
        parts.append(rp.__class__ is replay_mod.Parts)
        return run(rp, b, L)
    monkeypatch.setattr(replay_mod, "run", counted)
    rng = np.random.default_rng(0)
    w = rng.standard_normal((96, 200)).astype(np.float32)
    programs = {"softmax": (lambda x, w: ops.softmax(x * 2.0, axis=-1), (1000, 96)),
                "matmul + gelu": (lambda x, w: ops.gelu(x @ w) + 1.0, (1000, 96)),
                "tiled": (lambda x, w: ops.exp(x) * 0.5 - x, (3000, 96))}
    for name, (fn, shape) in programs.items():
        x, new = (rng.standard_normal(shape).astype(np.float32) for _ in range(2))
        results = []
        parts.clear()
        for dev in (Device(replay=True), Device(replay=False), Device(sequential=True)):
            g = dvmlang.graph(fn)
            runs = []
            for i in range(RUNS + 1):
                out = g(x if i < RUNS else new, w, device=dev)
                runs.append((_record(g.last_launch)[:4], out.tobytes()))
            results.append(runs)
        assert results[0] == results[1], name
        assert [(r[0][0], r[1]) for r in results[0]] == [(r[0][0], r[1]) for r in results[2]], name
        assert sum(parts) >= 2, name  # (not vacuous: the last two launches replay the groups)


@pytest.mark.parametrize("case", ["k_loop", "one_step", "store_into_an_input"])
def test_a_replayed_matmul_holds_its_cube_tiles_as_the_full_path_stores_them(case, monkeypatch):
    """A replay keeps a matmul's tiles in local variables (``npu/cube_chain.py``): loads into L1, the copies to
    L0A / L0B, the MMADs of a K loop accumulating into L0C and the accumulator's fill; slots that no step run as
    itself reads are not stored. Records, outputs and faults against ``Device(replay=False)`` and the sequential
    device's cycles and outputs, on relaunches, on new data and on tensors of other sizes (the instance's steps
    then run and are read back); a program that stores into its input between the loads and the product reads
    what the full path reads."""
    import dvmlang
    import dvmlang.language as dl

    @dvmlang.kernel
    def mm(a_ptr, b_ptr, c_ptr, N, K, BM: dl.constexpr, BN: dl.constexpr, BK: dl.constexpr, STORE: dl.constexpr):
        # (unmasked whole tiles over a grid of rows: each load is one view of its tensor, read straight)
        om = dl.program_id(0) * BM + dl.arange(0, BM)
        on = dl.program_id(1) * BN + dl.arange(0, BN)
        ok = dl.arange(0, BK)
        acc = dl.zeros((BM, BN), dtype=dl.float32)
        for k in range(0, K // BK):
            kk = k * BK + ok
            a = dl.load(a_ptr + om[:, None] * K + kk[None, :])
            b = dl.load(b_ptr + kk[:, None] * N + on[None, :])
            if STORE:
                dl.store(a_ptr + om[:, None] * K + kk[None, :], a * 2.0)
            acc = dl.dot(a, b, acc)
        dl.store(c_ptr + om[:, None] * N + on[None, :], acc.to(dl.float16))

    M, N, K = {"k_loop": (32, 48, 64), "one_step": (16, 16, 16), "store_into_an_input": (16, 32, 48)}[case]
    args = (np.zeros(M * K, np.float16), np.zeros(K * N, np.float16), np.zeros(M * N, np.float16), N, K)
    sources = _sources(monkeypatch)
    bc = _launched(monkeypatch, lambda: mm[(M // 16, 1)](*args, BM=16, BN=N, BK=16, STORE=case == "store_into_an_input",
                                                          device=Device()))
    count = _Count(monkeypatch)
    extra = [0, 0, 0, 0, 8, 0, 0]  # (elements added to the inputs: the instance's steps run on the other size)
    got = {}
    for dev in (Device(replay=True), Device(replay=False), Device(sequential=True)):
        outs = []
        for i, more in enumerate(extra):
            rng = np.random.default_rng(i)
            a = rng.standard_normal(M * K + more).astype(np.float16)
            b = rng.standard_normal(K * N + more).astype(np.float16)
            c = np.full(M * N, -1.0, np.float16)
            outs.append(_outcome(lambda: (dev.run(bc, {0: a, 1: b, 2: c}, name="mm"), [a, b, c])))
        got[dev] = outs
    full, seq = list(got.values())[1:]
    replayed = list(got.values())[0]
    assert replayed == full, "a replayed matmul differs from the full path's"
    assert [_cycles_and_outputs(o) for o in replayed] == [_cycles_and_outputs(o) for o in seq]
    assert count.n >= 4, "the launches were not replayed"
    if case != "store_into_an_input":  # (there the store between the loads and the product runs as itself)
        assert any("= MM" in s for s in sources), "the product was not computed from the held tiles"


def test_a_timed_launch_records_its_path_and_the_next_launch_replays_it(monkeypatch):
    """The first launch of a build's first instance is timed in full and runs its steps one by one; when its
    programs run as one batch that never splits, it records its path as it goes (``execute.PathRecorder``) and the
    second launch already replays it (one program or a batch of them). Programs that part at a branch (a persistent
    loop whose last trip only some take), and later instances of the build (another grid: their timed launch runs
    the compiled blocks, and may be their only one), leave the recording to their next launch, as before. Outputs
    against numpy, records against ``Device(replay=False)``."""
    import dvmlang
    import dvmlang.language as dl

    def make(scale):
        @dvmlang.kernel
        def affine(x_ptr, y_ptr, n, BLOCK: dl.constexpr):
            for blk in range(dl.program_id(0), dl.cdiv(n, BLOCK), dl.num_programs(0)):
                offs = blk * BLOCK + dl.arange(0, BLOCK)
                dl.store(y_ptr + offs, dl.load(x_ptr + offs, mask=offs < n) * scale + 1.0, mask=offs < n)
        return affine

    calls = {"record": 0, "generate": 0, "run": 0}
    for name in calls:
        def counted(*a, _f=getattr(replay_mod, name), _n=name):
            calls[_n] += 1
            return _f(*a)
        monkeypatch.setattr(replay_mod, name, counted)
    first = make(3.0)
    cases = [(first, 3.0, (4,), 64, "as timed"), (make(5.0), 5.0, (1,), 48, "as timed"),
             (make(7.0), 7.0, (4,), 80, "parted"), (first, 3.0, (2,), 32, "next launch")]
    for kern, scale, grid, n, when in cases:
        seen, records = [], {}
        for replay in (True, False):
            dev = Device(replay=replay)
            for i in range(4):
                x = np.arange(n, dtype=np.float32) * 0.5 + i
                y = np.full(n, -1.0, np.float32)
                before = dict(calls)
                rec = kern[grid](x, y, n, BLOCK=16, device=dev)
                np.testing.assert_array_equal(y, x * np.float32(scale) + np.float32(1.0))
                records.setdefault(replay, []).append((rec.cycles, rec.instructions, rec.bytes_read, rec.bytes_written,
                                                       y.tobytes()))
                if replay:
                    seen.append({k: calls[k] - before[k] for k in calls})
        assert records[True] == records[False]
        if when == "as timed":
            assert seen[0]["generate"] == 1 and seen[0]["record"] == 0, (grid, n, seen)
            assert all(s["run"] == 1 and s["generate"] == 0 for s in seen[1:]), (grid, n, seen)
        elif when == "parted":
            assert seen[0]["generate"] == 0 and seen[1]["record"] >= 1, seen
        else:
            assert seen[0]["generate"] == 0 and seen[1]["record"] == 1 and seen[1]["generate"] == 1, seen
            assert seen[2]["run"] == 1, seen


@pytest.mark.parametrize("grid", [(4,), (1,)])
def test_a_path_recorded_as_it_is_timed_is_the_path_its_next_launch_records(grid, monkeypatch):
    """A build's first instance records its path during its timed launch; the same instance recorded the other way
    (its first untimed launch, ``replay.record``) gives the same replay source, and both devices the same records
    and outputs."""
    import dvmlang
    import dvmlang.language as dl

    def make():
        @dvmlang.kernel
        def shift(x_ptr, y_ptr, n, BLOCK: dl.constexpr):
            pid = dl.program_id(0)
            offs = pid * BLOCK + dl.arange(0, BLOCK)
            v = dl.load(x_ptr + offs, mask=offs < n, other=2.0)
            dl.store(y_ptr + offs, dl.exp(v - dl.max(v, axis=0)) + pid, mask=offs < n)
        return shift

    out = {}
    for as_timed in (True, False):
        if not as_timed:
            monkeypatch.setattr(Device, "_records_as_timed", lambda self, base, m: False)
        sources = _sources(monkeypatch)
        kern, dev = make(), Device()
        got = []
        for i in range(3):
            x = np.arange(grid[0] * 16 - 3, dtype=np.float32) * 0.25 - i
            y = np.zeros_like(x)
            rec = kern[grid](x, y, x.size, BLOCK=16, device=dev)
            got.append((rec.cycles, rec.instructions, y.tobytes()))
        out[as_timed] = (sources[0] if sources else None, got)
    assert out[True][0] is not None and out[True][0] == out[False][0]
    assert out[True][1] == out[False][1]
