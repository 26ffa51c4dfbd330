"""Device profiles: every number the simulator uses, in one place.

``SOURCES`` says for each field whether it is a published figure for Ascend 910B-class parts or a
model assumption of dvmlang (``docs/device.md`` is generated from it).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from functools import cached_property

KiB = 1024
MiB = 1024 * 1024
GiB = 1024 * MiB


@dataclass(frozen=True)
class Profile:
    name: str = "910B2-like"
    cube_cores: int = 24
    vector_cores: int = 48
    clock_hz: float = 1.8e9
    ub_bytes: int = 192 * KiB
    l1_bytes: int = 512 * KiB
    l0a_bytes: int = 64 * KiB
    l0b_bytes: int = 64 * KiB
    l0c_bytes: int = 128 * KiB
    l2_bytes: int = 192 * MiB
    alignment: int = 32
    vector_bytes_per_cycle: int = 256
    vector_startup: int = 16
    reduce_tree_step: int = 4
    cube_macs_per_cycle: int = 4096
    cube_startup: int = 32
    cube_fp32_factor: int = 4
    hbm_bytes_per_s: float = 1.6e12
    hbm_bytes: int = 64 * GiB
    hbm_efficiency: float = 0.8625
    l2_bytes_per_s: float = 4.8e12
    mte_bytes_per_cycle: float = 32.0
    l2_read_bytes_per_cycle: float = 110.0
    l2_write_bytes_per_cycle: float = 86.0
    l2_across_launches: bool = True
    dma_latency: int = 240
    burst_overhead: int = 1
    gather_cycles_per_element: float = 1.0
    atomic_cycles_per_element: float = 4.0
    mte1_bytes_per_cycle: int = 256
    mte1_startup: int = 16
    fixpipe_bytes_per_cycle: int = 128
    fixpipe_startup: int = 16
    l0c_to_ub: bool = False
    handoff_bytes_per_cycle: float = 32.0
    handoff_flag_cycles: int = 100
    gm_align_bytes: int = 512
    unaligned_efficiency: float = 0.7
    scalar_dispatch: int = 2
    scalar_gm_latency: int = 120
    launch_overhead_us: float = 3.0
    program_dispatch_cycles: int = 3400
    max_programs: int = 1 << 24
    events_per_pipe_pair: int = 8
    double_buffer: bool = True

    @cached_property  # a frozen profile: worked out once (every launch reads it)
    def hbm_bytes_per_cycle(self) -> float:
        """What HBM sustains, all cores together (the nominal rate times ``hbm_efficiency``)."""
        return self.hbm_bytes_per_s * self.hbm_efficiency / self.clock_hz

    @cached_property  # a frozen profile: worked out once (every launch reads it)
    def l2_bytes_per_cycle(self) -> float:
        return self.l2_bytes_per_s / self.clock_hz

    @cached_property
    def capacities(self) -> dict:
        """On-chip space -> bytes (what a kernel's footprint must fit)."""
        return {"ub": self.ub_bytes, "l1": self.l1_bytes, "l0a": self.l0a_bytes, "l0b": self.l0b_bytes,
                "l0c": self.l0c_bytes}

    @cached_property  # a frozen profile: worked out once (every launch reads it)
    def launch_overhead_cycles(self) -> int:
        return int(round(self.launch_overhead_us * 1e-6 * self.clock_hz))

    def with_(self, **changes) -> "Profile":
        return replace(self, **changes)


SOURCES = {
    "name": ("", "label"),
    "cube_cores": ("published", "Ascend 910B2: 24 AI Cube cores (AIC)"),
    "vector_cores": ("published", "Ascend 910B2: 48 AI Vector cores (AIV), two per AIC"),
    "clock_hz": ("published (approximate)", "about 1.8 GHz"),
    "ub_bytes": ("published", "Unified Buffer per AIV"),
    "l1_bytes": ("published", "L1 buffer per AIC"),
    "l0a_bytes": ("published", "L0A per AIC"),
    "l0b_bytes": ("published", "L0B per AIC"),
    "l0c_bytes": ("published", "L0C per AIC (fp32 accumulators)"),
    "l2_bytes": ("published", "shared L2 (not modelled beyond its size)"),
    "alignment": ("published", "UB/L1 operand alignment; L0A/L0B 512 B, L0C 64 B"),
    "vector_bytes_per_cycle": ("published", "one 256-byte repeat per cycle (128 fp16 / 64 fp32 lanes)"),
    "vector_startup": ("assumption", "issue-to-first-repeat latency of a vector instruction"),
    "reduce_tree_step": ("assumption", "cycles per level of a reduction tree"),
    "cube_macs_per_cycle": ("published", "16x16x16 fp16 multiply-accumulates per cycle"),
    "cube_startup": ("assumption", "cube instruction latency"),
    "cube_fp32_factor": ("assumption", "fp32 inputs run the cube this many times slower than fp16"),
    "hbm_bytes_per_s": ("published", "nominal HBM rate, 1.6 TB/s (CANN ops-nn cross-platform guide, quoted in "
                                     "cann/ops-nn#6033 [R6]; spec)"),
    "hbm_efficiency": ("derived + measured", "the part of nominal HBM a streaming launch sustains: 1.38 TB/s, CANN's "
                                             "own tiling model (cores x `ddr_rate` x clock = 24 x 32 B x 1.8 GHz "
                                             "[R7]); the best public 910B2 measurement is 1.40 TB/s (pto-kernels "
                                             "matmul_add [R8]). Set 1.0 to stream at the nominal rate"),
    "hbm_bytes": ("published", "HBM capacity (informational: the simulator allocates on the host)"),
    "l2_bytes_per_s": ("derived", "L2 hit bandwidth shared by the active cores: 24 cores x `l2_read_rate=110` "
                                  "B/cycle x 1.8 GHz = 4.75 TB/s (CANN `Ascend910B1.ini`, quoted [R3])"),
    "mte_bytes_per_cycle": ("published (which core it caps is an assumption)",
                            "per-core rate of a GM transfer that misses L2 (and of writes to tensors larger than "
                            "L2): CANN ini `ddr_rate=32` B/cycle [R2][R4]. dvmlang applies it to the core a program "
                            "runs on (an AIV for vector kernels, an AIC for mix kernels); no public single-core "
                            "measurement exists"),
    "l2_read_bytes_per_cycle": ("published", "per-core rate of a GM read that hits L2: CANN ini `l2_read_rate=110` "
                                             "B/cycle (`Ascend910B1.ini`, quoted [R3])"),
    "l2_write_bytes_per_cycle": ("published", "per-core rate of a GM write into L2: CANN ini `l2_write_rate=86` "
                                              "B/cycle (`Ascend910B1.ini`, quoted [R3])"),
    "l2_across_launches": ("model choice", "L2 keeps what launches read and wrote (least recently used out, dirty "
                                           "lines written back to HBM when evicted): a later launch that reads a "
                                           "tensor still in L2 does not pay HBM for it, and writes to a tensor "
                                           "that fits L2 stay there. Residency follows the host array object "
                                           "(the same GM buffer); False: every launch starts cold and every "
                                           "write goes to HBM"),
    "dma_latency": ("assumption", "first-byte latency of a GM transfer"),
    "burst_overhead": ("assumption", "cycles per contiguous burst of a DMA"),
    "gather_cycles_per_element": ("assumption", "element-wise addressed transfers"),
    "atomic_cycles_per_element": ("assumption", "read-modify-write in GM per element"),
    "mte1_bytes_per_cycle": ("assumption", "L1 -> L0A/L0B bandwidth"),
    "mte1_startup": ("assumption", "MTE1 latency"),
    "fixpipe_bytes_per_cycle": ("assumption", "L0C -> UB/GM bandwidth"),
    "fixpipe_startup": ("assumption", "FixPipe latency"),
    "l0c_to_ub": ("published (910B has none)", "a direct L0C -> UB path. 910B-class parts have no UB on the cube "
                                               "core and no such path (pto-kernels "
                                               "synchronization-and-architecture.md [R8]): False charges the "
                                               "handoff through GM. True models a part that has the path (the "
                                               "FixPipe rate, no flag)"),
    "handoff_bytes_per_cycle": ("measured", "cube -> vector (and vector -> cube) tile handoff through a GM "
                                            "workspace, per cube core: 27-39 B/cycle, from C2V streaming of "
                                            "1.15-1.67 TB/s over 24 AIC on 910B2 (pto-kernels stream_c2v_v2c "
                                            "[R8]); V2C measured 1.10-1.23 TB/s"),
    "handoff_flag_cycles": ("assumption", "the cross-core flag and full pipe barrier of one handoff (not "
                                          "published; about 55 ns)"),
    "gm_align_bytes": ("published", "GM transfers split into 128/256/512 B segments; a burst starting on a 512 B "
                                    "boundary gets full bandwidth (CANN 8.5 best practice 'GM地址尽量512B对齐' and "
                                    "hardware constraints page)"),
    "unaligned_efficiency": ("measured", "bandwidth of a burst that does not start on `gm_align_bytes`, as a "
                                         "fraction: a 32 B-aligned address gets as little as 70% of the 512 "
                                         "B-aligned bandwidth on A2 (same page, measured by Huawei). Set 1.0 to "
                                         "ignore alignment"),
    "scalar_dispatch": ("assumption", "scalar-unit cycles to decode and dispatch one virtual instruction"),
    "scalar_gm_latency": ("assumption", "scalar-unit read of UB/GM"),
    "launch_overhead_us": ("measured range", "fixed cost per kernel launch: the smallest kernels timed on the "
                                             "device take 1.4-2.0 us (Triton-Ascend) to 2.5-4.6 us (torch_npu "
                                             "aclnn) (FlagGems `mode=kernel` tables); 3 us is inside the range"),
    "program_dispatch_cycles": ("measured (derived)", "cost of starting a program on a core after the core's first "
                                                      "(grids beyond the core count): TileLang-Ascend rmsnorm on "
                                                      "910B3 runs 512-1024 small blocks of about 2 us each, 'all "
                                                      "the time spent on per-block fixed overhead' "
                                                      "(tile-ai/tilelang-ascend#1791), and Triton-Ascend warns that "
                                                      "grids beyond the core count are delivered in batches with "
                                                      "significant latency (performance_guidelines.md). 3,400 "
                                                      "cycles (1.9 us): a tiny block's own work mostly overlaps "
                                                      "the dispatch, so such a block takes about 2 us. 0 models "
                                                      "a persistent grid loop with free dispatch"),
    "max_programs": ("model choice", "programs (grid product) per launch. The hardware's 65535 (blockDim) bounds "
                                     "the decoder's own launch, one block per core, which runs the grid's programs "
                                     "in waves; 2**24 bounds the simulator's per-program state (about 200 B of "
                                     "host memory each)"),
    "events_per_pipe_pair": ("published (medium confidence)", "event ids per pipe pair"),
    "double_buffer": ("model choice", "ping-pong buffers: in loops with loads (the body is emitted twice) and "
                                      "between consecutive programs on a core, when the footprint fits twice"),
}

PROFILES = {
    "910B1": Profile(name="910B1-like", clock_hz=1.85e9),
    "910B2": Profile(),
    "910B3": Profile(name="910B3-like", cube_cores=20, vector_cores=40),
    "910B4": Profile(name="910B4-like", cube_cores=20, vector_cores=40, clock_hz=1.5e9, hbm_bytes=32 * GiB,
                     hbm_bytes_per_s=0.96e12, hbm_efficiency=1.0),
    "A3-9362": Profile(name="A3-9362-like", cube_cores=20, vector_cores=40),
}
for _k in list(PROFILES):
    PROFILES[PROFILES[_k].name] = PROFILES[_k]

# where each profile's own figures come from (../shared/calibration.md, section 1a, lists the references); the
# fields not named here are the 910B2's (SOURCES)
PROFILE_SOURCES = {
    "910B1": "CANN `Ascend910B1.ini`: 24 AIC / 48 AIV, `cube_freq=1850`, `l2_size` 192 MiB (spec, quoted in public "
             "repositories); HBM 64 GB at 1.6 TB/s as the 910B2 (assumption: the family's published figure)",
    "910B2": "CANN `Ascend910B2.ini`: 24 AIC / 48 AIV, `cube_freq=1800`, 192 MiB L2; 64 GB HBM at 1.6 TB/s "
             "(CANN ops-nn cross-platform guide; spec)",
    "910B3": "catlass `AscendC910B3{MaxBlock=20, MaxAivBlock=40}` (spec); clock, HBM and L2 as the 910B2 "
             "(assumption: not published)",
    "910B4": "CANN `Ascend910B4.ini` test fixture: 20 AIC / 40 AIV, 1500 MHz, 32 GB (spec as quoted); HBM rate "
             "0.96 TB/s from CANN's tiling model, cores x `ddr_rate=32` B/cycle x clock (derived; not an "
             "official peak), taken as the sustained rate (`hbm_efficiency` 1.0)",
    "A3-9362": "one die of an A3 (Ascend 910_93xx) part, CANN `Ascend910_9362.ini`: 20 AIC / 40 AIV (spec); clock, "
               "HBM and L2 as the 910B2 (assumption)",
}


def get_profile(p) -> Profile:
    from ..errors import DvmError
    if isinstance(p, Profile):
        return p
    if p is None:
        return PROFILES["910B2"]
    if isinstance(p, str) and p in PROFILES:
        return PROFILES[p]
    if isinstance(p, dict):
        base = PROFILES["910B2"]
        unknown = set(p) - {f.name for f in fields(Profile)}
        if unknown:
            raise DvmError(f"unknown profile fields: {', '.join(sorted(unknown))}")
        return replace(base, **p)
    raise DvmError(f"unknown device profile {p!r}; choose one of {sorted(PROFILES)} or pass a Profile")
