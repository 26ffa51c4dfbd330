"""Many simulated NPUs: what the model gives against the published figures, what communicating inside a kernel
buys, and what simulating a tensor-parallel model costs the host.

    python benchmarks/multi_npu.py [--ranks 2 4 8] [--no-tp]

1. HCCL all-reduce on 2, 4 and 8 x 910B at 1 MiB, 64 MiB and 1 GiB: the simulated time and algorithm bandwidth
   beside the published figure (docs/distributed.md).
2. examples/multi_npu/matmul_reduce_scatter.py: simulated time of the fused kernel and of the matmul kernel +
   reduce-scatter collective.
3. examples/multi_npu/tp_llama.py's forward with its ranks as threads: host wall and process CPU time (the first
   call, compiling included), the simulated time and the time in all-reduces.
"""

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.append(os.path.join(ROOT, "examples", "multi_npu"))

from dvmlang.npu import System  # noqa: E402

PUBLISHED = {2: 18.0, 4: 30.0, 8: 72.0}  # GB/s, HCCL all-reduce on 910B (gameofdimension/limulidae README)


def calibration():
    print("HCCL all-reduce, simulated vs published (alg bandwidth = data size / time)")
    print(f"{'ranks':>5} {'size':>10} {'algorithm':<15} {'time us':>10} {'GB/s':>7} {'published':>10} {'ratio':>6}")
    for n in (2, 4, 8):
        s = System(n)
        for size in (1 << 20, 64 << 20, 1 << 30):
            rec = s.time_collective("all_reduce", size)
            gbps = rec.alg_bandwidth / 1e9
            pub = PUBLISHED[n] if size >= 64 << 20 else None
            print(f"{n:>5} {size:>10} {rec.algorithm:<15} {rec.time_us:>10.1f} {gbps:>7.1f} "
                  f"{pub if pub else '-':>10} {gbps / pub if pub else float('nan'):>6.2f}")


def fused():
    import matmul_reduce_scatter as m
    t_sep, t_fused = m.run()
    print(f"\nmatmul + reduce-scatter on {m.R} ranks ({m.M}x{m.N}x{m.K} fp32): separate {t_sep:.1f} us, fused "
          f"{t_fused:.1f} us simulated: {t_sep / t_fused:.2f}x")


def tp(ranks):
    import tp_llama
    print("\ntensor-parallel tiny Llama forward, ranks as threads (first call: dynamo and kernel builds included)")
    print(f"{'ranks':>5} {'host wall s':>12} {'process CPU s':>14} {'simulated us':>13} {'in all-reduce us':>17}")
    for n in ranks:
        w0, c0 = time.perf_counter(), time.process_time()
        rows = tp_llama.run(ranks=(n,))
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
        _, clock, comm, _, _ = rows[0]
        print(f"{n:>5} {wall:>12.1f} {cpu:>14.1f} {clock:>13.1f} {comm:>17.1f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, nargs="*", default=[2, 4, 8])
    ap.add_argument("--no-tp", action="store_true", help="skip the tensor-parallel host timing")
    args = ap.parse_args()
    print(f"load: {os.getloadavg()[0]:.2f}")
    calibration()
    fused()
    if not args.no_tp:
        tp(args.ranks)


if __name__ == "__main__":
    main()
