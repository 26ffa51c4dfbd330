"""How simulated NPUs are connected: servers of NPUs joined inside a server by HCCS (910B, a full mesh of
dedicated links) or UB (A3, a non-blocking switch), and between servers by RoCE, one NIC per NPU.

Every number is a field of ``Fabric`` or ``Topology`` with its source in ``SOURCES``: a published figure (cited),
one derived from published figures, or a model assumption (said why). ``docs/distributed.md`` lists them.
Collective algorithms (``npu.collectives``) read a topology; they never hold a figure of their own.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from ..errors import DvmError

KiB = 1024
MiB = 1024 * KiB


@dataclass(frozen=True)
class Fabric:
    """One kind of link. ``kind``: ``"mesh"`` (a dedicated link per pair of NPUs, full duplex) or ``"port"`` (each
    NPU has one port into a non-blocking network: everything it sends at once shares the port, and so does
    everything it receives)."""

    name: str
    kind: str
    line_bytes_per_s: float  # one direction of a link (mesh) or a port: the physical bound
    bytes_per_s: float  # what one transfer stream sustains on it (measured where published)
    latency_us: float  # alpha: the fixed cost of one step of an algorithm over this fabric

    def __post_init__(self):
        if self.kind not in ("mesh", "port"):
            raise DvmError(f"fabric {self.name}: kind must be 'mesh' or 'port', got {self.kind!r}")
        if not 0 < self.bytes_per_s <= self.line_bytes_per_s:
            raise DvmError(f"fabric {self.name}: the sustained rate ({self.bytes_per_s:g} B/s) must be positive and "
                           f"at most the line rate ({self.line_bytes_per_s:g} B/s)")
        if self.latency_us < 0:
            raise DvmError(f"fabric {self.name}: latency_us must be >= 0, got {self.latency_us!r}")


@dataclass(frozen=True)
class Topology:
    """Servers of ``npus_per_server`` NPUs; rank ``r`` sits in server ``r // npus_per_server``."""

    name: str
    npus_per_server: int
    intra: Fabric
    inter: Fabric
    intra_algorithm: str  # what HCCL runs inside a server: "mesh" (910B) or "ring" (A3's double ring)
    small_bytes: int  # all_reduce at most this large inside a server: one-shot (every rank reads every input)
    buffer_bytes: int  # HCCL_BUFFSIZE: a larger collective runs in loops of this many bytes, each paying its steps
    launch_us: float  # a collective's task launch on the device's stream

    def __post_init__(self):
        if not isinstance(self.npus_per_server, int) or self.npus_per_server < 1:
            raise DvmError(f"npus_per_server must be a positive int, got {self.npus_per_server!r}")
        if self.intra_algorithm not in ("mesh", "ring"):
            raise DvmError(f"intra_algorithm must be 'mesh' or 'ring', got {self.intra_algorithm!r}")

    def server(self, rank: int) -> int:
        return rank // self.npus_per_server

    def fabric(self, a: int, b: int) -> Fabric:
        """The fabric a transfer from rank ``a`` to rank ``b`` crosses."""
        return self.intra if self.server(a) == self.server(b) else self.inter

    def with_(self, **changes) -> "Topology":
        """A copy with fields changed; ``intra_bytes_per_s=...`` and the like change a fabric's field."""
        sub = {}
        for key in list(changes):
            for which in ("intra", "inter"):
                prefix = which + "_"
                if key.startswith(prefix) and key[len(prefix):] in {f.name for f in fields(Fabric)}:
                    sub.setdefault(which, {})[key[len(prefix):]] = changes.pop(key)
        known = {f.name for f in fields(Topology)}
        bad = sorted(set(changes) - known)
        if bad:
            raise DvmError(f"unknown topology field {bad[0]!r}; the fields are {sorted(known)} and intra_/inter_ + "
                           f"{sorted(f.name for f in fields(Fabric))}")
        for which, ch in sub.items():
            changes[which] = replace(getattr(self, which), **ch)
        return replace(self, **changes)


# 910B (Atlas 800T A2): eight NPUs, each with seven HCCS links, one to every other NPU of the server.
HCCS_910B = Fabric("HCCS", "mesh", line_bytes_per_s=28e9, bytes_per_s=19.3e9, latency_us=1.0)
ROCE_200G = Fabric("RoCE", "port", line_bytes_per_s=25e9, bytes_per_s=22.6e9, latency_us=2.0)
# A3 (Atlas 900 A3 SuperPoD / CloudMatrix384): 910C packages of two dies, each die an HCCL rank; 392 GB/s per
# package one way into the UB switches, so 196 GB/s per die.
UB_A3 = Fabric("UB", "port", line_bytes_per_s=196e9, bytes_per_s=196e9 * 0.69, latency_us=1.0)
ROCE_400G = Fabric("RoCE", "port", line_bytes_per_s=25e9, bytes_per_s=22.6e9, latency_us=2.0)

TOPOLOGIES = {
    "910B": Topology("910B", npus_per_server=8, intra=HCCS_910B, inter=ROCE_200G, intra_algorithm="mesh",
                     small_bytes=256 * KiB, buffer_bytes=200 * MiB, launch_us=3.0),
    "A3": Topology("A3", npus_per_server=16, intra=UB_A3, inter=ROCE_400G, intra_algorithm="ring",
                   small_bytes=256 * KiB, buffer_bytes=200 * MiB, launch_us=3.0),
}

# field -> (kind, source). Kinds: published, measured, derived, assumption.
SOURCES = {
    "HCCS line rate": ("published (third party), halved: assumption",
                       "56 GB/s per HCCS link, seven links per 910B = 392 GB/s (www.meemx.com/p/hccl-contest-log-overall, "
                       "quoting public material on an 8 x 910B server; `npu-smi info -t topo` shows HCCS between every "
                       "pair). Taken as both directions together, 28 GB/s each way: the bound no transfer beats"),
    "HCCS sustained rate": ("measured", "19.06-19.37 GB/s device-to-device writes over HCCS between two NPUs of one "
                            "A2 server, 1-8 MB blocks; reads 25.2-25.7 GB/s (Huawei HIXL "
                            "benchmarks/A2_benchmark_performance.md, mirrored in xiaojia151/Hixl). HCCL's mesh "
                            "algorithms write (SDMA): 19.3 GB/s"),
    "HCCS latency": ("derived", "about 1 us per step: the HIXL write times above are 55.0 us for 1 MiB and 433.1 us for "
                     "8 MiB, a line of slope 1/19.4 GB/s through 1.0 us"),
    "RoCE line rate": ("published", "one 200 GbE port per NPU on Atlas 800T A2 (25 GB/s)"),
    "RoCE sustained rate": ("measured", "RDMA device-to-device 22.5-22.6 GB/s between two A2 servers, 1-8 MB "
                            "(HIXL A2 benchmark, as above)"),
    "RoCE latency": ("assumption", "2 us per step: a NIC round trip on top of the HCCS step (no public figure)"),
    "UB line rate": ("published", "392 GB/s one way per Ascend 910C into the UB switches of CloudMatrix384, two "
                     "dies per package (Zuo et al., Serving Large Language Models on Huawei CloudMatrix384, "
                     "arXiv 2506.12708): 196 GB/s per die"),
    "UB sustained rate": ("assumption", "69% of the line rate, the efficiency HCCS writes reach on 910B (no public "
                          "A3 measurement found)"),
    "A3 RoCE": ("published (line) / assumption (rest)", "400 Gb/s per NPU (CloudMatrix384 paper) shared by its two "
                "dies: 25 GB/s per die, sustained as on A2"),
    "small_bytes": ("published (code)", "HCCL's 910B all_reduce selector takes AllReduceMeshSmallCountExecutor (every "
                    "rank reduces all inputs, one step) up to HCCL_SMALL_COUNT_256_KB and the looping mesh executor "
                    "(reduce-scatter + all-gather) above (hccl all_reduce_operator.cc, MeshTopoSelector)"),
    "buffer_bytes": ("published", "HCCL_BUFFSIZE defaults to 200 MB: larger collectives run in loops of that size "
                     "(HCCL environment variable reference)"),
    "launch_us": ("assumption", "3 us: a collective is a task launched on the device's stream like a kernel "
                  "(the kernel launch cost of docs/device.md)"),
    "reduction": ("derived", "gamma, the time to reduce a byte: read two operands and write one at the device's "
                  "sustained HBM rate (profile.hbm_bytes_per_s x hbm_efficiency)"),
    "algorithms": ("published", "Mesh, Ring, RHD and Pairwise with HCCL's own cost formulas (alpha + n beta + n "
                   "gamma model): hicann/hccl docs/en/user_guide/coll_algo_intro/{algo_intro,Mesh,Ring,RHD,Pairwise}.md; "
                   "hierarchical order (intra-server reduce-scatter, inter-server all-reduce, intra-server "
                   "all-gather) from the same algo_intro.md"),
}


def get_topology(t) -> Topology:
    """A topology by name (``"910B"``, ``"A3"``), or ``t`` itself; None: 910B."""
    if t is None:
        return TOPOLOGIES["910B"]
    if isinstance(t, Topology):
        return t
    if isinstance(t, str) and t in TOPOLOGIES:
        return TOPOLOGIES[t]
    raise DvmError(f"unknown topology {t!r}; choose one of {sorted(TOPOLOGIES)} or pass a dvmlang.npu.Topology")
