"""Eight simulated 910B NPUs in one server (HCCS between every pair): every collective, its result against numpy
and its time from the algorithm HCCL runs at that size, then the all-reduce against the published HCCL figures.

    python examples/multi_npu/collectives.py
    dvmlang trace examples/multi_npu/collectives.py --view comm   # the collectives, links and ranks
"""

import numpy as np

from dvmlang.npu import System

RANKS = 8
MiB, GiB = 1 << 20, 1 << 30
# HCCL all-reduce on 8 x 910B (torch_npu, fp32): 72 GB/s algorithm bandwidth, the best of a 0.1 MB-8 GB sweep
# (gameofdimension/limulidae README); no public figure at 1 MiB was found (docs/distributed.md)
PUBLISHED_GBPS = 72.0


def run(verbose=False):
    s = System(RANKS)
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((64, 256)).astype(np.float32) for _ in range(RANKS)]
    total = xs[0].copy()
    for x in xs[1:]:
        total = total + x

    for out in s.all_reduce(xs):
        np.testing.assert_array_equal(out, total)  # rank order, bit for bit
    for r, out in enumerate(s.reduce_scatter(xs)):
        np.testing.assert_array_equal(out, total[8 * r:8 * r + 8])
    for out in s.all_gather(xs):
        np.testing.assert_array_equal(out, np.concatenate(xs))
    for out in s.broadcast(xs, root=5):
        np.testing.assert_array_equal(out, xs[5])
    splits = [[(i + j) % 3 for j in range(RANKS)] for i in range(RANKS)]  # uneven: some blocks empty
    parts = [x[:sum(row)] for x, row in zip(xs, splits)]
    outs = s.all_to_all(parts, splits=splits)
    for j in range(RANKS):
        want = np.concatenate([parts[i][sum(splits[i][:j]):sum(splits[i][:j + 1])] for i in range(RANKS)])
        np.testing.assert_array_equal(outs[j], want)
    np.testing.assert_array_equal(s.send(xs[2], 2, 6), xs[2])
    s.barrier()

    rows = []
    for rec in s.records:
        assert rec.time_us >= rec.bound_us  # no collective beats its links
        rows.append((rec.op, rec.algorithm, rec.nbytes, rec.time_us))
    calib = []
    for n in (MiB, 64 * MiB, GiB):
        rec = s.time_collective("all_reduce", n)
        calib.append((n, rec.algorithm, rec.time_us, rec.alg_bandwidth / 1e9))
    for n, _, _, gbps in calib[1:]:
        assert 0.75 <= gbps / PUBLISHED_GBPS <= 1.25, f"all_reduce of {n} B: {gbps:.1f} GB/s"
    if verbose:
        print(f"{'collective':<15} {'algorithm':<15} {'bytes':>9} {'time':>10}")
        for op, alg, n, us in rows:
            print(f"{op:<15} {alg:<15} {n:>9} {us:>7.2f} us")
        print(f"\nall_reduce on {RANKS} x 910B  (published: {PUBLISHED_GBPS:.0f} GB/s at large sizes)")
        for n, alg, us, gbps in calib:
            print(f"{n:>11} B  {alg:<14} {us:>10.1f} us  {gbps:6.1f} GB/s")
    return rows, calib


if __name__ == "__main__":
    run(verbose=True)
