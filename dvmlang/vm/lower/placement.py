"""Pass 2: give every tile a place.

UB by default; a tile loaded only to be a dot operand goes straight to L1. Views (reshape) share their
source's buffer, and a broadcast that only feeds elementwise ops stays at its source's shape. Loop-carried
values and branch results get a *home* (a UB buffer, or a register for scalars) shared by the init, the
block arguments, the yielded values and the result; a carried accumulator that only feeds one dot stays in
L0C for the whole loop. A value that only feeds a home is computed directly into it (yield and init
coalescing) when no use of the home's old value comes after it. Loops with loads get ping-pong copies of
their body's buffers (double buffering).
"""

from __future__ import annotations

from ... import dtypes as dt
from ...ir.builder import broadcast_shapes
from ...ir.core import Block, Function, Op, TileType, Value
from .program import Buffer, Liveness, Place, Placement, nbytes

ELEMENTWISE = frozenset({"binary", "compare", "select", "fma"})


def place(fn: Function, profile, live: Liveness) -> Placement:
    users: dict[int, list[Op]] = {}
    for op in fn.walk():
        for v in op.operands:
            users.setdefault(v.id, []).append(op)
    plan = Placement({}, [], users, {}, {}, {}, {}, set(), {})
    # a build that did not fit asks again (vm/lower/split.py): results in place over dead operands, and UB kept
    # free above the tiles for what the emitters stage there
    plan.ub_reserve = fn.meta.get("ub_reserve", 0)
    planner = _Planner(plan, live, profile.double_buffer)
    planner.inplace = bool(fn.meta.get("inplace"))
    planner.block(fn.body)
    planner.fold_inits()
    planner.l0c_fills(fn)
    return plan


class _Planner:
    """The placement pass over one function: fills ``plan``; ``pending_init`` holds the loop inits that may be
    computed directly in their loop's home (decided once every place is known)."""

    def __init__(self, plan: Placement, live: Liveness, double_buffer: bool):
        self.plan = plan
        self.live = live
        self.double_buffer = double_buffer
        self.pending_init: dict[int, Buffer] = {}
        self.direct: dict[int, Buffer] = {}  # value id -> the branch home (L1) its DMA loads into
        self.inplace = False  # compute elementwise results over operands that die there (dead_operand_buffer)

    def new_buffer(self, space, size, start, end, name, loc) -> Buffer:
        b = Buffer(space, size, start, end, name, loc)
        self.plan.buffers.append(b)
        return b

    def place(self, v: Value, space="ub", buf: Buffer | None = None, name=""):
        if buf is None:
            s, e = self.live.interval(v)
            op = v.op
            buf = self.new_buffer(space, nbytes(v.shape, v.dtype), s, e, name or _value_name(v),
                                  op.loc if op is not None else None)
        else:
            s, e = self.live.interval(v)
            buf.start = min(buf.start, s)
            buf.end = max(buf.end, e)
        self.plan.places[v.id] = Place(buf.space, buf, v.shape, v.dtype)
        return buf

    def block(self, block: Block):
        places = self.plan.places
        for op in block.ops:
            k = op.kind
            if k in ("for", "while"):
                self.loop(op)
            elif k in ("if", "scope"):
                self.branches(op)
            else:
                for r in op.regions:
                    self.block(r)
            for r in op.results:
                if not isinstance(r.type, TileType) or r.id in places:
                    continue
                if k == "reshape":
                    src = op.operands[0]
                    buf = places[src.id].buf
                    self.place(r, buf=buf)
                elif k == "dma_load" and op.attrs.get("into"):
                    # a wrapped/clamped tile's second DMA completes the first one's tile in place
                    self.place(r, buf=places[op.operands[-1].id].buf)
                elif k == "dma_load" and self.chain_end(r).id in self.direct:
                    self.place(r, buf=self.direct[self.chain_end(r).id])
                elif k == "dma_load" and self.only_dot_operand(r):
                    self.place(r, "l1")
                elif self.inplace and (buf := self.dead_operand_buffer(op, r)) is not None:
                    self.place(r, buf=buf)  # computed in place over an operand that dies here
                elif k == "broadcast" and self.all_elementwise_users(r):
                    src = op.operands[0]
                    buf = places[src.id].buf
                    places[r.id] = Place(buf.space, buf, src.shape, src.dtype)
                    _, e = self.live.interval(r)
                    buf.end = max(buf.end, e)
                else:
                    self.place(r)

    def dead_operand_buffer(self, op: Op, r: Value) -> Buffer | None:
        """A UB buffer of an operand of the elementwise ``op`` that is dead after ``op`` (its last use, and the last
        use of every view of it, is ``op``) and has exactly ``r``'s shape and bytes: ``r`` is computed over it in
        place (one vector instruction reads each element before it writes it), so a temporary is not counted as
        live after its last use. Asked for only when a build does not fit otherwise: a buffer written in place
        is one a loop's next load cannot fill early."""
        if op.kind not in ELEMENTWISE and op.kind not in ("unary", "cast") or len(op.results) != 1 or \
                op.attrs.get("bitcast"):
            return None
        here = self.live.pos[id(op)]
        size = nbytes(r.shape, r.dtype)
        for x in op.operands:
            p = self.plan.places.get(x.id)
            if p is None or not isinstance(x.type, TileType) or x.shape != r.shape or \
                    x.dtype.itemsize != r.dtype.itemsize:
                continue
            buf = p.buf
            if buf.space != "ub" or buf.nbytes != size or buf.end != here or buf.name == "carried" or \
                    id(buf) in self.plan.alt or any(buf is h for hs in self.plan.homes.values() for h in hs):
                continue
            return buf
        return None

    def chain_end(self, v: Value) -> Value:
        """The last DMA of a chain that completes ``v`` in place (``dma_load`` with ``into``), or ``v``."""
        while True:
            users = self.plan.users.get(v.id, [])
            if len(users) != 1 or users[0].kind != "dma_load" or not users[0].attrs.get("into") or \
                    users[0].operands[-1] is not v:
                return v
            v = users[0].result

    def only_dot_operand(self, v: Value) -> bool:
        """A loaded tile used only as a matrix operand is loaded straight into L1 (no UB round trip)."""
        users = self.plan.users.get(v.id, [])
        if len(users) == 1 and users[0].kind == "dma_load" and users[0].attrs.get("into") and \
                users[0].operands[-1] is v and v not in users[0].operands[:-1]:
            return self.only_dot_operand(users[0].result)  # completed in place by a second DMA
        return len(v.shape) in (2, 3) and bool(users) and all(
            u.kind == "dot" and v in u.operands[:2] and (len(u.operands) < 3 or u.operands[2] is not v)
            for u in users)

    def l0c_accumulator(self, op: Op, i: int, args: list) -> bool:
        """A carried tile that only feeds the accumulator of one dot whose result is yielded back stays in L0C
        for the whole loop (MMAD accumulates in place; no copies per iteration)."""
        if op.kind != "for" or len(op.regions) != 1:
            return False
        body = op.regions[0]
        arg = args[i]
        term = body.terminator
        if term is None or term.kind != "yield" or arg.dtype not in (dt.float32, dt.int32):
            return False
        users = self.plan.users.get(arg.id, [])
        if len(users) != 1 or users[0].kind != "dot" or users[0].parent is not body:
            return False
        d = users[0]
        if len(d.operands) < 3 or d.operands[2] is not arg or d.operands[0] is arg or d.operands[1] is arg:
            return False
        y = term.operands[i]
        return y is d.result and self.plan.users.get(y.id) == [term]

    def l0c_fills(self, fn: Function):
        """A constant tile (``full``) used only as the init of loops' L0C accumulators is not a tile at all: each
        loop fills its accumulator with the scalar (L0C_FILL), so its UB buffer is dropped."""
        plan = self.plan
        for op in fn.walk():
            if op.kind != "for":
                continue
            for v, h in zip(op.operands[3:], plan.homes.get(id(op), [])):
                if v.op is None or v.op.kind != "full" or not isinstance(h, Buffer) or h.space != "l0c":
                    continue
                if all(self.only_l0c_init(u, v) for u in plan.users.get(v.id, [])) and \
                        not plan.shares(plan.places[v.id].buf, v.id):
                    plan.places[v.id].buf.nbytes = 0
                    plan.l0c_fills.add(v.id)

    def only_l0c_init(self, op: Op, v: Value) -> bool:
        """Whether ``op`` uses ``v`` only as the init of L0C accumulators."""
        if op.kind != "for" or v in op.operands[:3]:
            return False
        homes = self.plan.homes.get(id(op), [])
        return all(isinstance(h, Buffer) and h.space == "l0c" for x, h in zip(op.operands[3:], homes) if x is v)

    def stored_from_l0c(self, res: Value):
        """The values FixPipe can store straight from ``res``'s L0C accumulator (``res`` and the casts of it that
        only feed stores), when ``res`` is used by nothing but stores of it and such casts; else None."""
        out = [res]
        for u in self.plan.users.get(res.id, []):
            if u.kind == "cast" and not u.attrs.get("bitcast") and u.attrs.get("rounding") is None and \
                    res.dtype is dt.float32 and u.result.dtype in (dt.float16, dt.bfloat16, dt.float32) and \
                    all(_stores(w, u.result) for w in self.plan.users.get(u.result.id, [])) and \
                    self.plan.users.get(u.result.id):
                out.append(u.result)
            elif not _stores(u, res):
                return None
        return out if len(res.shape) in (2, 3) and self.plan.users.get(res.id) else None

    def all_elementwise_users(self, v: Value) -> bool:
        """Whether a broadcast may stay unmaterialised: every user is elementwise and still gets its result's shape
        from numpy broadcasting when every broadcast among its operands is left at its source's shape (a tile
        next to a scalar, or two broadcasts that only meet in the result, need the copy)."""
        users = self.plan.users.get(v.id, [])
        if not users:
            return False
        for u in users:
            if u.kind not in ELEMENTWISE or not isinstance(u.results[0].type, TileType):
                return False
            shape = ()
            for x in u.operands:
                if isinstance(x.type, TileType):
                    src = x.op.operands[0] if x.op is not None and x.op.kind == "broadcast" else x
                    shape = broadcast_shapes(shape, src.shape)
            if shape != u.results[0].shape:
                return False
        return True

    def home_for(self, values: list[Value], loc) -> list:
        homes = []
        for v in values:
            if isinstance(v.type, TileType):
                homes.append(self.new_buffer("ub", nbytes(v.shape, v.dtype), 0, 0, "carried", loc))
            else:
                homes.append(("reg", v.type.dtype))
        return homes

    def attach(self, v: Value, home: Buffer, start, end):
        home.start = min(home.start or start, start) if home.end else start
        home.end = max(home.end, end)
        self.plan.places[v.id] = Place(home.space, home, v.shape, v.dtype)

    def scalar_home(self, op: Op, i: int, values: list[Value], span: tuple):
        key = ("home", id(op), i)
        for v in values:
            self.plan.scalar_homes[v.id] = key
        self.plan.home_spans[key] = span

    def loop(self, op: Op):
        plan = self.plan
        body_blocks = op.regions
        if op.kind == "for":
            carried_args = [r.args[1:] for r in body_blocks]
            inits = op.operands[3:]
        else:
            carried_args = [r.args for r in body_blocks]
            inits = op.operands
        start = self.live.pos[id(op)]
        end = self.live.op_end[id(op)]
        homes = self.home_for(list(op.results), op.loc)
        plan.homes[id(op)] = homes
        for i, h in enumerate(homes):
            res = op.results[i]
            _, re_ = self.live.interval(res)
            lo, hi = start, max(end, re_)
            # the init may be computed directly in the home when the loop is its only user
            init = inits[i]
            if isinstance(h, Buffer) and self.l0c_accumulator(op, i, carried_args[0]):
                h.space = "l0c"
                h.name = "accumulator (L0C)"
                h.start, h.end = lo, end
                for args in carried_args:
                    self.attach(args[i], h, lo, end)
                plan.places[res.id] = Place("l0c", h, res.shape, res.dtype)
                stored = self.stored_from_l0c(res)
                if stored is not None:
                    # the result only goes to GM (maybe converted): FixPipe stores it from L0C, no UB copy
                    for v in stored:
                        plan.places[v.id] = Place("l0c", h, res.shape, res.dtype)
                        h.end = max(h.end, self.live.interval(v)[1])
                    h.end = max(h.end, re_)
                elif plan.users.get(res.id):
                    # results are read after the loop through a UB copy made once, at the loop exit
                    shadow = self.new_buffer("ub", nbytes(res.shape, res.dtype), end, max(end, re_),
                                             "accumulator result", op.loc)
                    plan.l0c_shadow.setdefault(id(op), []).append((h, shadow, res))
                    plan.places[res.id] = Place("ub", shadow, res.shape, res.dtype)
                continue
            if isinstance(h, Buffer):
                h.start, h.end = lo, hi
                for args in carried_args:
                    self.attach(args[i], h, lo, hi)
                self.attach(res, h, lo, hi)
            else:
                self.scalar_home(op, i, [args[i] for args in carried_args] + [res], (lo, hi, h[1]))
            if isinstance(h, Buffer) and init.op is not None and plan.users.get(init.id) == [op] and \
                    _coalescible_def(init.op):
                self.pending_init[init.id] = h
        first_body_buffer = len(plan.buffers)
        for r, args in zip(body_blocks, carried_args):
            self.block(r)
            self.coalesce_yield(r, homes, args, op)
        if self.double_buffer_loop(op):
            # the body is emitted twice per trip; the second copy uses alternate buffers so the loads of one
            # iteration overlap the compute of the previous one (ping-pong)
            for b in plan.buffers[first_body_buffer:]:
                if b.nbytes > 0 and id(b) not in plan.alt and b.name != "carried":
                    alt = Buffer(b.space, b.nbytes, b.start, b.end, b.name + " (ping-pong)", b.loc)
                    plan.alt[id(b)] = alt
                    plan.buffers.append(alt)
            plan.unrolled.add(id(op))

    def double_buffer_loop(self, op: Op) -> bool:
        if op.kind != "for" or not self.double_buffer:
            return False
        body = op.regions[0]
        has_load = False
        for o in body.ops:
            for inner in o.walk():
                if inner.kind in ("for", "while"):
                    return False
                if inner.kind in ("dma_load", "gather"):
                    has_load = True
        return has_load

    def coalesce_yield(self, block: Block, homes, args, op):
        plan = self.plan
        term = block.terminator
        if term is None or term.kind != "yield":
            return
        if op.kind == "while" and block is op.regions[0]:
            return
        for i, v in enumerate(term.operands):
            h = homes[i]
            if not isinstance(h, Buffer) or v.op is None or v.op.parent is not block:
                continue
            place = plan.places.get(v.id)
            if place is None or place.buf is h or not _coalescible_def(v.op):
                continue
            if plan.users.get(v.id) != [term]:
                continue
            if place.buf.name == "carried":
                continue
            # every use of the block argument must come no later than v's definition
            arg = args[i]
            vpos = self.live.pos[id(v.op)]
            ok = True
            for u in plan.users.get(arg.id, []):
                up = self.live.pos[id(u)]
                if up > vpos or (up == vpos and not _inplace_ok(v.op, arg)):
                    ok = False
                    break
            if not ok or any(plan.places.get(x.id) is not None and plan.places[x.id].buf is place.buf
                             for x in v.op.operands if x is not v):
                continue
            if plan.shares(place.buf, v.id):
                continue
            place.buf.end = place.buf.start  # the temporary buffer is no longer needed
            place.buf.nbytes = 0
            plan.places[v.id] = Place(h.space, h, v.shape, v.dtype)

    def branches(self, op: Op):
        start = self.live.pos[id(op)]
        end = self.live.op_end[id(op)]
        homes = self.home_for(list(op.results), op.loc)
        self.plan.homes[id(op)] = homes
        for i, h in enumerate(homes):
            res = op.results[i]
            _, re_ = self.live.interval(res)
            if isinstance(h, Buffer):
                h.start, h.end = start, max(end, re_)
                self.attach(res, h, start, h.end)
                if op.kind == "if" and self.only_dot_operand(res):
                    # a dot operand chosen by a branch (access.py's guarded DMAs, or the gather they replace)
                    # lives in L1; a DMA yielded by a branch loads straight into it
                    h.space = "l1"
                    self.plan.places[res.id] = Place("l1", h, res.shape, res.dtype)
                    for r in op.regions:
                        term = r.terminator
                        v = term.operands[i] if term is not None and term.kind == "yield" else None
                        if v is not None and v.op is not None and v.op.kind == "dma_load" and \
                                v.op.parent is r and self.plan.users.get(v.id) == [term]:
                            self.direct[v.id] = h
            else:
                self.scalar_home(op, i, [res], (start, max(end, re_), h[1]))
        for r in op.regions:
            self.block(r)

    def fold_inits(self):
        """A loop init whose only user is its loop is computed directly in the loop's UB home."""
        places = self.plan.places
        for vid, home in self.pending_init.items():
            p = places.get(vid)
            if home.space != "ub":
                continue
            if p is not None and p.buf is not home and not self.plan.shares(p.buf, vid):
                p.buf.nbytes = 0
                places[vid] = Place(home.space, home, p.shape, p.dtype)
                home.start = min(home.start, p.buf.start)


def _inplace_ok(op: Op, arg: Value) -> bool:
    """An elementwise op may overwrite an operand that has the result's exact shape; a dot accumulates
    into its accumulator."""
    if op.kind == "dot":
        return len(op.operands) == 3 and op.operands[2] is arg and arg not in op.operands[:2]
    if op.kind not in ELEMENTWISE and op.kind not in ("unary", "cast"):
        return False
    if op.kind == "cast" and op.operands[0].dtype.itemsize != op.results[0].dtype.itemsize:
        return False
    return all(x is not arg or x.shape == op.results[0].shape for x in op.operands)


def _stores(op: Op, v: Value) -> bool:
    """Whether ``op`` is a DMA store of the tile ``v`` (and uses ``v`` for nothing else)."""
    if op.kind != "dma_store":
        return False
    i = 1 + 3 * op.attrs["rank"]
    return op.operands[i] is v and sum(x is v for x in op.operands) == 1


def _coalescible_def(op: Op) -> bool:
    return op.kind not in ("reshape", "broadcast", "for", "while", "if", "scope") and not op.regions


def _value_name(v: Value) -> str:
    op = v.op
    if op is None:
        return "value"
    k = op.kind
    if k in ("binary", "unary", "compare", "reduce", "scan"):
        return f"{k} {op.attrs.get('op', '')}".strip()
    return k
