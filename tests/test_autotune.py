"""dvmlang.autotune / heuristics / Config: deterministic tuning on simulated cycles that never changes what
the caller sees, pruning of configs that do not fit, caches in memory and on disk."""

import sys

import numpy as np
import pytest

import dvmlang
import dvmlang.language as dl
from dvmlang.autotune import Autotuner


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("DVMLANG_CACHE_DIR", str(tmp_path))
    return tmp_path


@dvmlang.kernel
def accumulate(x_ptr, out_ptr, n, BLOCK: dl.constexpr):
    """out += 2 * x: running it twice gives a different result, so any tuning run that leaked would show."""
    offs = dl.program_id(0) * BLOCK + dl.arange(0, BLOCK)
    mask = offs < n
    dl.store(out_ptr + offs, dl.load(out_ptr + offs, mask=mask) + 2 * dl.load(x_ptr + offs, mask=mask), mask=mask)


@dvmlang.kernel
def total(x_ptr, out_ptr, n, BLOCK: dl.constexpr):
    offs = dl.program_id(0) * BLOCK + dl.arange(0, BLOCK)
    dl.atomic_add(out_ptr, dl.sum(dl.load(x_ptr + offs, mask=offs < n, other=0), axis=0))


BLOCKS = (64, 512, 4096, 1 << 20)  # the last one cannot fit the 192 KiB unified buffer
GRID = lambda meta: (dl.cdiv(meta["n"], meta["BLOCK"]),)  # noqa: E731


def tuned(fn=accumulate, blocks=BLOCKS, **kw):
    return dvmlang.autotune([dvmlang.Config({"BLOCK": b}) for b in blocks], key=["n"], **kw)(fn)


def data(n, seed=0):
    rng = np.random.default_rng(seed)
    return rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)


def cycles_of(block, x, out, n):
    return accumulate[GRID](x, out.copy(), n, BLOCK=block).cycles


def test_picks_the_fewest_cycles_and_prunes_what_does_not_fit():
    n = 50_000
    x, out = data(n)
    expected = {b: cycles_of(b, x, out, n) for b in BLOCKS[:-1]}
    k = tuned()
    k[GRID](x, out.copy(), n)
    timings = {c.kwargs["BLOCK"]: t for c, t in k.configs_timings.items()}
    assert timings[1 << 20] == float("inf")
    assert {b: timings[b] for b in expected} == expected
    assert k.best_config.kwargs["BLOCK"] == min(expected, key=expected.get)


def test_tuning_changes_nothing_the_caller_sees():
    n = 10_007
    x, out = data(n)
    before = out.copy()
    k = tuned()
    k[GRID](x, out, n)  # four candidates ran on these arrays; only the final launch may show
    np.testing.assert_array_equal(out, before + 2 * x)


def test_reset_to_zero_zeroes_for_each_candidate_and_results_are_exact():
    n = 4_096
    x = np.ones(n, np.float32)
    out = np.zeros(1, np.float32)
    calls = []
    k = tuned(total, blocks=(128, 1024), reset_to_zero=["out_ptr"],
              pre_hook=lambda nargs: calls.append(float(nargs["out_ptr"][0])))
    k[GRID](x, out, n)
    assert calls == [0.0, 0.0]  # zeroed before each candidate
    assert out[0] == n


def test_one_tuning_per_key_in_memory_and_on_disk(cache_dir):
    x, out = data(20_000)
    k = tuned()
    k[GRID](x, out, 20_000)
    k[GRID](x, out, 20_000)
    assert k.tunings == 1
    k[GRID](x[:999], out[:999], 999)
    assert k.tunings == 2
    again = tuned()  # a new process would see the same: the choice is on disk
    again[GRID](x, out, 20_000)
    assert again.tunings == 0 and again.best_config.kwargs == k.cache[k._key({"x_ptr": x, "out_ptr": out,
                                                                                "n": 20_000})].kwargs
    assert list(cache_dir.glob("autotune/*.json"))  # content-addressed entries (dvmlang/tuning/store.py)


def test_a_corrupt_disk_cache_means_tuning_again(cache_dir):
    x, out = data(3_000)
    tuned()[GRID](x, out, 3_000)
    for f in cache_dir.glob("autotune/*.json"):
        f.write_text("{not json")
    k = tuned()
    k[GRID](x, out, 3_000)
    assert k.tunings == 1


def test_no_config_fits_is_a_resource_error():
    x, out = data(100)
    with pytest.raises(dvmlang.ResourceError, match="no config fits"):
        tuned(blocks=(1 << 20, 1 << 21))[GRID](x, out, 100)


def test_heuristics_and_autotune_compose():
    n = 3_333
    x, out = data(n)
    k = dvmlang.heuristics({"BLOCK": lambda a: dl.next_power_of_2(a["n"]) // 4})(accumulate)
    expect = out + 2 * x
    k[GRID](x, out, n)
    np.testing.assert_array_equal(out, expect)

    @dvmlang.autotune([dvmlang.Config({}, num_warps=w) for w in (4, 8)], key=["n"])
    @dvmlang.heuristics({"BLOCK": lambda a: 256})
    @dvmlang.kernel
    def scaled(x_ptr, out_ptr, n, BLOCK: dl.constexpr):
        offs = dl.program_id(0) * BLOCK + dl.arange(0, BLOCK)
        dl.store(out_ptr + offs, dl.load(x_ptr + offs, mask=offs < n) * 3, mask=offs < n)

    res = np.zeros_like(x)
    scaled[GRID](x, res, n)
    np.testing.assert_array_equal(res, x * 3)


def test_prune_configs_by():
    x, out = data(5_000)
    seen = []
    k = tuned(prune_configs_by={"early_config_prune": lambda cs, nargs: [c for c in cs if c.kwargs["BLOCK"] < 4096],
                                "perf_model": lambda **kw: -kw["BLOCK"], "top_k": 1},
              post_hook=lambda nargs, exception: seen.append(exception))
    k[GRID](x, out, 5_000)
    assert [c.kwargs["BLOCK"] for c in k.configs_timings] == [512]  # one config left: not even timed
    assert seen == []


def test_report_is_a_table():
    from rich.console import Console
    x, out = data(2_000)
    k = tuned()
    k[GRID](x, out, 2_000)
    console = Console(record=True, width=100, color_system=None)
    console.print(k.report())
    text = console.export_text()
    assert "BLOCK: 64" in text and "pruned (does not fit)" in text and "best" in text


def test_bad_declarations_are_launch_errors():
    with pytest.raises(dvmlang.LaunchError, match="key of `accumulate` names 'm'"):
        dvmlang.autotune([dvmlang.Config({"BLOCK": 64})], key=["m"])(accumulate)
    with pytest.raises(dvmlang.LaunchError, match="not a parameter"):
        dvmlang.heuristics({"BLOK": lambda a: 1})(accumulate)
    x, out = data(10)
    with pytest.raises(dvmlang.LaunchError, match="both from the call and from an autotune config"):
        tuned(blocks=(64,))[GRID](x, out, 10, BLOCK=64)
    assert isinstance(tuned(), Autotuner)


def test_a_trace_around_a_tuned_launch_records_that_launch_not_the_tuning():
    k = tuned()
    x, out = data(3000)
    with dvmlang.trace(summary_only=True) as t:
        k[GRID](x, out, 3000)
    assert len(t.launches) == 1 and k.tunings == 1  # three configs ran (one pruned), one launch is recorded


def test_configs_differing_only_in_launch_options_are_timed_once():
    configs = [dvmlang.Config({"BLOCK": b}, num_warps=w) for b in (64, 512) for w in (4, 8)]
    k = dvmlang.autotune(configs, key=["n"])(accumulate)
    x, out = data(3000)
    before = accumulate.stats.launches
    k[GRID](x, out, 3000)
    assert accumulate.stats.launches - before == 3  # two trials and the launch
    t = k.configs_timings
    assert t[configs[0]] == t[configs[1]] and t[configs[2]] == t[configs[3]] and t[configs[0]] != t[configs[2]]
    np.testing.assert_allclose(out, data(3000)[1] + 2 * x)


def test_parallel_tuning_picks_what_serial_tuning_picks(monkeypatch):
    """Candidates after the first run in forked processes when that pays off; simulated cycles do not depend on
    where a config runs, so the timings and the choice are the serial ones, and the caller's arrays are intact."""
    at = sys.modules["dvmlang.autotune"]  # the module; dvmlang.autotune is the decorator
    n = 50_000
    x, out = data(n)
    serial = tuned(cache_results=False)
    serial[GRID](x, out.copy(), n)
    calls = []
    real_fork_map = at._fork_map
    monkeypatch.setattr(at, "PARALLEL_TUNING_SECONDS", 0.0)
    monkeypatch.setattr(at, "_fork_map", lambda *a: calls.append(len(a[1])) or real_fork_map(*a))
    monkeypatch.setattr(at.os, "cpu_count", lambda: 2)
    before = out.copy()
    par = tuned(cache_results=False)
    par[GRID](x, out, n)
    assert calls == [len(BLOCKS) - 1]  # everything after the first candidate went to processes
    assert [t for t in par.configs_timings.values()] == [t for t in serial.configs_timings.values()]
    assert par.best_config.kwargs == serial.best_config.kwargs
    np.testing.assert_array_equal(out, before + 2 * x)


def test_torch_arguments_are_restored_and_reset_too():
    torch = pytest.importorskip("torch")
    n = 4_096
    x = torch.ones(n)
    out = torch.full((1,), 5.0)
    k = tuned(total, blocks=(128, 1024), reset_to_zero=["out_ptr"])
    k[GRID](x, out, n)
    assert out.item() == 5.0 + n  # zeroed for each candidate, then restored; the final launch adds to what was there
    acc = torch.zeros(n)
    before = acc.clone()
    k2 = tuned()
    k2[GRID](x, acc, n)
    torch.testing.assert_close(acc, before + 2 * x)  # four candidates ran on `acc`; only the final launch shows


def test_early_config_prune_gets_the_arguments_as_keywords_when_it_takes_them():
    seen = {}

    def prune(configs, named_args, **kwargs):
        seen.update(kwargs)
        return [c for c in configs if c.kwargs["BLOCK"] <= kwargs["n"]]

    k = tuned(prune_configs_by={"early_config_prune": prune})
    x, out = data(300)
    k[GRID](x, out, 300)
    assert seen["n"] == 300 and all(c.kwargs["BLOCK"] <= 300 for c in k.configs_timings)
