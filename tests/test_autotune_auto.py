"""autotune(configs="auto"): the search space, the cost model's ranking, determinism across processes and
orders, the content-addressed cache, errors in one candidate, and the executors (local pool, Ray)."""

import json
import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import dvmlang
import dvmlang.language as dl
from dvmlang.tuning import executor as ex
from dvmlang.tuning import space, store


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("DVMLANG_CACHE_DIR", str(tmp_path))
    return tmp_path


@dvmlang.kernel
def matmul(a, b, c, M, N, K, BM: dl.constexpr, BN: dl.constexpr, BK: dl.constexpr):
    rm = dl.program_id(0) * BM + dl.arange(0, BM)
    rn = dl.program_id(1) * BN + dl.arange(0, BN)
    rk = dl.arange(0, BK)
    acc = dl.zeros((BM, BN), dl.float32)
    for k in range(0, K, BK):
        a_t = dl.load(a + rm[:, None] * K + (k + rk)[None, :], mask=(rm[:, None] < M) & ((k + rk)[None, :] < K),
                      other=0.0)
        b_t = dl.load(b + (k + rk)[:, None] * N + rn[None, :], mask=((k + rk)[:, None] < K) & (rn[None, :] < N),
                      other=0.0)
        acc = dl.dot(a_t, b_t, acc)
    dl.store(c + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@dvmlang.kernel
def rows_sum(x, out, n_rows, n_cols, BLOCK: dl.constexpr):
    cols = dl.arange(0, BLOCK)
    for row in range(dl.program_id(0), n_rows, dl.num_programs(0)):
        v = dl.load(x + row * n_cols + cols, mask=cols < n_cols, other=0.0)
        dl.store(out + row, dl.sum(v, axis=0))


def _mm_args(M=96, N=80, K=64):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    return a, b, np.zeros((M, N), np.float32), M, N, K


def _mm_grid(M, N):
    return lambda m: (dl.cdiv(M, m["BM"]), dl.cdiv(N, m["BN"]))


def test_space_finds_tiles_and_persistence():
    prof = dvmlang.npu.default_device().profile
    knobs = {k.name: k for k in space.discover(matmul, {"a", "b", "c", "M", "N", "K"}, None, prof)}
    assert set(knobs) == {"BM", "BN", "BK"} and knobs["BM"].values == (16, 32, 64, 128, 256)
    knobs = {k.name: k for k in space.discover(rows_sum, {"x", "out", "n_rows", "n_cols", "BLOCK"}, None, prof, (7,))}
    assert set(knobs) == {"programs"} and knobs["programs"].axis == 0
    assert 7 in knobs["programs"].values and prof.vector_cores in knobs["programs"].values
    # hints restrict, fix and add; a hint that names nothing is an error that says what the names are
    knobs = {k.name: k.values for k in space.discover(matmul, {"a", "b", "c", "M", "N", "K"},
                                                      {"BM": [32, 64], "BK": 32}, prof)}
    assert knobs["BM"] == (32, 64) and knobs["BK"] == (32,)
    with pytest.raises(dvmlang.LaunchError, match="its parameters are"):
        space.discover(matmul, set(), {"BLOCKM": [1]}, prof)


def test_a_kernel_whose_program_id_is_used_otherwise_is_not_persistent():
    @dvmlang.kernel
    def partial(x, out, n, BLOCK: dl.constexpr):
        acc = dl.zeros((BLOCK,), dl.float32)
        for i in range(dl.program_id(0), n, dl.num_programs(0)):
            acc += dl.load(x + i * BLOCK + dl.arange(0, BLOCK))
        dl.store(out + dl.program_id(0), dl.sum(acc, axis=0))  # per-program results: the grid is not free
    assert space.persistent_axes(partial.source.tree) == set()
    assert space.persistent_axes(rows_sum.source.tree) == {0}


def test_auto_matmul_is_correct_and_simulates_a_part():
    a, b, c, M, N, K = _mm_args()
    k = dvmlang.autotune(key=["M", "N", "K"], executor="serial")(matmul)
    k[_mm_grid(M, N)](a, b, c, M, N, K)
    np.testing.assert_allclose(c, a.astype(np.float32) @ b.astype(np.float32), rtol=1e-3, atol=1e-3)
    res = k.search
    assert res.best is not None and 0 < res.simulated < len(res.rows)
    assert all(r.simulated is not None or r.error for r in res.rows if r.picked)
    # the winner is the best of what was simulated, and its cycles are what a plain launch of it gives
    best = min(r.simulated for r in res.rows if r.simulated is not None)
    cfg = k.best_config.kwargs
    rec = matmul[(dl.cdiv(M, cfg["BM"]), dl.cdiv(N, cfg["BN"]))](a, b, c, M, N, K, **cfg)
    assert rec.cycles == best
    import io

    from rich.console import Console
    con = Console(width=200, file=io.StringIO())
    con.print(k.report())
    text = con.file.getvalue()
    assert "Spearman" in text and "best" in text and "does not fit" in text


def test_persistent_grid_is_tuned_and_results_stay_exact():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((300, 100)).astype(np.float32)
    out = np.zeros(300, np.float32)
    k = dvmlang.autotune(key=["n_rows"], executor="serial")(rows_sum)
    k[(5,)](x, out, 300, 100, BLOCK=128)
    np.testing.assert_allclose(out, x.sum(1), rtol=1e-5, atol=1e-5)
    assert k.best_config.programs and set(k.best_config.programs) == {0}


def test_the_cost_model_ranks_like_the_simulator_on_matmul():
    from dvmlang.tuning.model import estimate
    from dvmlang.tuning.search import spearman
    a, b, c, M, N, K = 256, 256, 256, None, None, None
    a, b, c, M, N, K = _mm_args(256, 256, 256)
    est, sim = [], []
    for bm, bn, bk in [(32, 32, 32), (64, 64, 32), (128, 128, 64), (64, 128, 128), (128, 64, 32), (32, 128, 64)]:
        g = (dl.cdiv(M, bm), dl.cdiv(N, bn))
        bc = matmul.encode(g, a, b, c, M, N, K, BM=bm, BN=bn, BK=bk)
        est.append(estimate(bc, dvmlang.npu.default_device().profile).cycles)
        sim.append(matmul[g](a, b, c, M, N, K, BM=bm, BN=bn, BK=bk).cycles)
    assert spearman(est, sim) > 0.8, (est, sim)


SCRIPT = textwrap.dedent('''
    import json, sys
    import numpy as np
    import dvmlang, dvmlang.language as dl
    sys.path.insert(0, {here!r})
    from test_autotune_auto import matmul, _mm_args, _mm_grid
    a, b, c, M, N, K = _mm_args(128, 96, 64)
    hints = {{"BM": {bm}, "BN": [32, 64, 16], "BK": [64, 32]}}
    k = dvmlang.autotune(key=["M"], hints=hints, executor={executor!r}, cache_results=False)(matmul)
    k[_mm_grid(M, N)](a, b, c, M, N, K)
    print(json.dumps(k.best_config.kwargs, sort_keys=True))
''')


def test_same_winner_in_two_processes_and_two_orders():
    here = os.path.dirname(__file__)
    outs = []
    for bm, executor in (([16, 32, 64, 128], "serial"), ([128, 64, 32, 16], "local:2")):
        r = subprocess.run([sys.executable, "-c", SCRIPT.format(here=here, bm=bm, executor=executor)],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        outs.append(json.loads(r.stdout.strip().splitlines()[-1]))
    assert outs[0] == outs[1]


def test_cache_is_content_addressed_and_a_bad_entry_is_a_miss(cache_dir, tmp_path):
    a, b, c, M, N, K = _mm_args()
    hints = {"BM": [32, 64], "BN": [32, 64], "BK": [32, 64]}
    k = dvmlang.autotune(key=["M"], hints=hints, executor="serial")(matmul)
    k[_mm_grid(M, N)](a, b, c, M, N, K)
    first = k.best_config.kwargs
    files = list((cache_dir / "autotune").glob("*.json"))
    assert len(files) == 1 and len(files[0].stem) == 64
    again = dvmlang.autotune(key=["M"], hints=hints, executor="serial")(matmul)
    again[_mm_grid(M, N)](a, b, c, M, N, K)
    assert again.tunings == 0 and again.best_config.kwargs == first
    # export, wipe, import: the same choice without tuning
    bundle = tmp_path / "team.json"
    assert store.export_cache(bundle) == 1
    files[0].unlink()
    assert store.import_cache(bundle) == 1
    third = dvmlang.autotune(key=["M"], hints=hints, executor="serial")(matmul)
    third[_mm_grid(M, N)](a, b, c, M, N, K)
    assert third.tunings == 0 and third.best_config.kwargs == first
    # truncated, foreign (another entry's digest), tampered: each a miss, and the tuning rewrites it
    path = next((cache_dir / "autotune").glob("*.json"))
    good = path.read_text()
    entry = json.loads(good)
    for bad in (good[: len(good) // 2], json.dumps({**entry, "digest": "0" * 64}),
                json.dumps({**entry, "body": {**entry["body"], "config": {"BM": 999, "BN": 32, "BK": 32}}})):
        path.write_text(bad)
        k2 = dvmlang.autotune(key=["M"], hints=hints, executor="serial")(matmul)
        k2[_mm_grid(M, N)](a, b, c, M, N, K)
        assert k2.tunings == 1 and k2.best_config.kwargs == first
    with pytest.raises(dvmlang.DvmError, match="not an autotuning cache file"):
        (tmp_path / "x.json").write_text("[]")
        store.import_cache(tmp_path / "x.json")


def test_pool_reports_errors_and_time_outs_and_goes_on():
    def work(i):
        if i == 1:
            raise dvmlang.MemoryFault("boom")
        if i == 2:
            time.sleep(60)
        if i == 3:
            os._exit(3)  # the worker dies
        return i * 10

    t0 = time.perf_counter()
    outs = ex.LocalPool(2).map(work, [0, 1, 2, 3, 4, 5], timeout=2.0)
    assert time.perf_counter() - t0 < 30
    assert [o.value for o in outs] == [0, None, None, None, 40, 50]
    assert "MemoryFault" in outs[1].error and "timed out" in outs[2].error and "died" in outs[3].error


def test_a_candidate_that_faults_is_reported_and_the_sweep_goes_on():
    @dvmlang.kernel
    def picky(x, out, n, BLOCK: dl.constexpr):
        i = dl.arange(0, BLOCK)
        v = dl.load(x + i, mask=i < n)
        if BLOCK == 64:
            v = dl.load(x + i + 10_000)  # out of bounds: a MemoryFault for this candidate only
        dl.store(out + i, v, mask=i < n)
    x = np.arange(40, dtype=np.float32)
    out = np.zeros(40, np.float32)
    k = dvmlang.autotune(key=["n"], hints={"BLOCK": [64, 128, 256]}, executor="local:2", budget=3, explore=0)(picky)
    k[(1,)](x, out, 40)
    np.testing.assert_array_equal(out, x)
    errs = {r.config["BLOCK"]: r.error for r in k.search.rows}
    assert errs[64] and "MemoryFault" in errs[64] and k.best_config.kwargs["BLOCK"] != 64


def test_executor_specs():
    assert isinstance(ex.get_executor("serial"), ex.SerialExecutor)
    assert ex.get_executor("local:3").workers == 3
    with pytest.raises(dvmlang.DvmError, match="unknown executor"):
        ex.get_executor("gpu")


def test_ray_local_cluster_starts_runs_and_stops_in_bounded_time():
    pytest.importorskip("ray")
    code = textwrap.dedent(f'''
        import sys, time, json
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        t0 = time.perf_counter()
        import dvmlang, dvmlang.language as dl
        from dvmlang.tuning.executor import get_executor
        from test_autotune_auto import matmul, _mm_args, _mm_grid
        with get_executor("ray://local:2") as pool:
            outs = pool.map(lambda i: i * i, list(range(6)), timeout=60)
            assert [o.value for o in outs] == [0, 1, 4, 9, 16, 25], outs
            outs = pool.map(lambda i: time.sleep(60) if i == 1 else i, [0, 1, 2], timeout=2)
            assert outs[0].value == 0 and outs[2].value == 2 and "timed out" in outs[1].error, outs
            a, b, c, M, N, K = _mm_args()
            k = dvmlang.autotune(key=["M"], hints={{"BM": [32, 64], "BN": [32, 64], "BK": [32]}}, executor=pool,
                                 cache_results=False, budget=2, explore=1)(matmul)
            k[_mm_grid(M, N)](a, b, c, M, N, K)
            import numpy as np
            np.testing.assert_allclose(c, a.astype(np.float32) @ b.astype(np.float32), rtol=1e-3, atol=1e-3)
            serial = dvmlang.autotune(key=["M"], hints={{"BM": [32, 64], "BN": [32, 64], "BK": [32]}},
                                      executor="serial", cache_results=False, budget=2, explore=1)(matmul)
            serial[_mm_grid(M, N)](a, b, c, M, N, K)
            assert k.best_config.kwargs == serial.best_config.kwargs
        import ray
        assert not ray.is_initialized()
        print(json.dumps({{"seconds": time.perf_counter() - t0}}))
    ''')
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]


def test_triton_autotune_with_no_configs_searches():
    import dvmlang.triton as triton
    import dvmlang.triton.language as tl

    @triton.autotune(configs=[], key=["n_elements"], executor="serial")
    @triton.jit
    def scale(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
        offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n_elements) * 2.0, mask=offs < n_elements)

    x = np.arange(5000, dtype=np.float32)
    out = np.zeros_like(x)
    scale[lambda meta: (triton.cdiv(5000, meta["BLOCK_SIZE"]),)](x, out, 5000)
    np.testing.assert_array_equal(out, 2 * x)
    assert scale.auto and scale.search is not None and "BLOCK_SIZE" in scale.best_config.kwargs


def test_an_unclassifiable_constexpr_is_a_clear_error():
    @dvmlang.kernel
    def mode(x, out, n, MODE: dl.constexpr):
        i = dl.arange(0, 16)
        v = dl.load(x + i, mask=i < n)
        dl.store(out + i, v * 2 if MODE == 1 else v, mask=i < n)
    x = np.ones(16, np.float32)
    with pytest.raises(dvmlang.LaunchError, match="hints=.*MODE"):
        dvmlang.autotune(key=["n"], executor="serial")(mode)[(1,)](x, np.zeros_like(x), 16)
    out = np.zeros_like(x)
    k = dvmlang.autotune(key=["n"], executor="serial", hints={"MODE": [0, 1]})(mode)
    k[(1,)](x, out, 16)
    np.testing.assert_array_equal(out, x * (2 if k.best_config.kwargs["MODE"] == 1 else 1))


def test_with_the_disk_cache_off_a_tuning_writes_no_file(tmp_path, monkeypatch):
    """DVMLANG_CACHE_DIR=off turns the autotuning store off too (it once wrote into a folder named 'off')."""
    monkeypatch.setenv("DVMLANG_CACHE_DIR", "off")
    monkeypatch.chdir(tmp_path)
    assert store.cache_dir() is None
    d = store.digest({"kernel": "k"})
    assert store.save(d, {"best": 1}) is False and store.load(d) is None
    k = dvmlang.autotune(configs=[dvmlang.Config({"BM": 16, "BN": 16, "BK": 16}),
                                  dvmlang.Config({"BM": 32, "BN": 32, "BK": 32})], key=["M", "N", "K"])(matmul)
    a, b, c, M, N, K = _mm_args()
    k[_mm_grid(M, N)](a, b, c, M, N, K)
    np.testing.assert_allclose(c, a.astype(np.float32) @ b.astype(np.float32), rtol=1e-3, atol=1e-3)
    assert store.export_cache(tmp_path / "bundle.json") == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bundle.json"]
