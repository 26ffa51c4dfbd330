"""Differential generator for control flow: random kernels of nested ``for`` (runtime and constexpr bounds,
``dl.static_range``), ``while`` and ``if`` on runtime conditions (program id, loop indices, loaded scalars),
``break`` / ``continue`` / early ``return``, loop-carried scalars and a tile accumulator, per-program outputs
and an atomic counter shared by all programs.

Each random program is a small AST (tuples, below), rendered twice: as kernel source (exec'd from a
registered in-memory file so the frontend can read it) and as a plain-Python oracle written from
``docs/language.md``'s semantics: int32 arithmetic wraps, ``range`` is Python's, a loop's ``break`` and
``continue`` act on the innermost loop, ``return`` ends the program (stores before it have happened), atomics
add in any order (integer sums do not depend on it), and ``dl.static_range`` unrolls. The batched device
(compiled, and step by step), the sequential device and the oracle must agree exactly (int32), and within
tolerance for the float32 accumulator; the three devices agree on the cycles too.
"""

import contextlib
import itertools
import linecache

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import dvmlang
import dvmlang.language as dl
from fuzzing import budget, side_by_side

BATCHED = dvmlang.npu.Device(compiled="always")  # every straight-line region as generated code, from its first run
STEPS = dvmlang.npu.Device(compiled=False)  # every instruction step by step
SEQUENTIAL = dvmlang.npu.Device(sequential=True)
VARS = ("a", "b")  # loop-carried int32 scalars, initialised before the body
NVALS = 8  # the loaded-scalar input has this many elements
TILE = 4  # the loop-carried tile accumulator `t` has this shape

# ---- the program AST ------------------------------------------------------------------------------------
# expressions: ("const", k) | ("var", name) | ("pid",) | ("n",) | ("load", e) | ("bin", op, e1, e2)
# conditions:  ("cmp", op, e1, e2)
# statements:  ("set", v, e) | ("add", v, e) | ("tile", e) | ("ftile", e) | ("atomic", e) | ("store", e)
#              | ("if", c, body, orelse) | ("for", i, lo, hi, step, body) | ("static", i, k, body)
#              | ("while", w, k, body) | ("break",) | ("continue",) | ("return",)
CMP = ("<", "<=", ">", ">=", "==", "!=")
BIN = ("+", "-", "^", "*")


def _exprs(names):
    leaves = [st.tuples(st.just("const"), st.integers(-3, 5)), st.just(("pid",)), st.just(("n",))]
    leaves += [st.tuples(st.just("var"), st.sampled_from(names))]
    leaf = st.one_of(leaves)
    return st.recursive(leaf, lambda e: st.one_of(
        st.tuples(st.just("bin"), st.sampled_from(BIN[:3]), e, e),
        st.tuples(st.just("bin"), st.just("*"), e, st.tuples(st.just("const"), st.integers(-2, 3))),
        st.tuples(st.just("load"), e)), max_leaves=4)


@st.composite
def _block(draw, names, depth, loops, static, counter):
    """A list of statements; ``loops`` counts the enclosing runtime loops, ``static`` whether a
    dl.static_range encloses them (no exits there), ``counter`` numbers loop variables."""
    out = []
    for _ in range(draw(st.integers(1, 3 if depth < 3 else 2))):
        kinds = ["set", "add", "tile", "ftile", "atomic", "store"]
        if depth < 3:
            kinds += ["if", "for", "static", "while"]
        if loops and not static:
            kinds += ["break", "continue"]
        if not static:
            kinds += ["return"]
        kind = draw(st.sampled_from(kinds))
        e = _exprs(names)
        if kind in ("set", "add"):
            out.append((kind, draw(st.sampled_from(VARS)), draw(e)))
        elif kind in ("tile", "ftile", "atomic", "store"):
            out.append((kind, draw(e)))
        elif kind in ("break", "continue", "return"):
            # an exit is taken only on some paths (a runtime condition guards it), and skips an update
            out.append(("if", draw(_conds(names)), [(kind,)], []))
            out.append(("add", draw(st.sampled_from(VARS)), draw(e)))
        elif kind == "if":
            body = draw(_block(names, depth + 1, loops, static, counter))
            orelse = draw(st.one_of(st.just([]), _block(names, depth + 1, loops, static, counter)))
            out.append(("if", draw(_conds(names)), body, orelse))
        elif kind == "for":
            i = f"i{next(counter)}"
            lo = draw(st.one_of(st.tuples(st.just("const"), st.integers(-1, 2)), st.just(("pid",))))
            hi = draw(st.one_of(st.tuples(st.just("const"), st.integers(0, 5)), st.just(("n",)),
                                *[st.tuples(st.just("bin"), st.just("+"), st.just((x,)),
                                            st.tuples(st.just("const"), st.integers(0, 3))) for x in ("pid", "n")]))
            step = draw(st.sampled_from([1, 1, 1, 2, -1]))
            if step < 0:
                lo, hi = hi, lo
            body = draw(_block(names + (i,), depth + 1, loops + 1, static, counter))
            out.append(("for", i, lo, hi, step, body + [("add", "b", ("var", i))]))  # count the iterations
        elif kind == "static":
            i = f"s{next(counter)}"
            body = draw(_block(names + (i,), depth + 1, loops, True, counter))
            out.append(("static", i, draw(st.integers(1, 3)), body))
        else:
            w = f"w{next(counter)}"
            body = draw(_block(names, depth + 1, loops + 1, static, counter))
            out.append(("while", w, draw(st.integers(1, 4)), body + [("add", "a", ("const", 1))]))
    return out


def _conds(names):
    """Mostly an order comparison of a loop index or variable with a small bound, so both paths are taken."""
    e = _exprs(names)
    lhs = st.one_of(st.tuples(st.just("var"), st.sampled_from(names)), e)
    rhs = st.one_of(st.tuples(st.just("const"), st.integers(-1, 4)), st.just(("n",)), st.just(("pid",)), e)
    return st.tuples(st.just("cmp"), st.sampled_from(CMP[:4] * 3 + CMP[4:]), lhs, rhs)


@st.composite
def programs(draw):
    return draw(_block(VARS, 0, 0, False, itertools.count()))


# ---- rendering as kernel source --------------------------------------------------------------------------
def _expr_src(e) -> str:
    k = e[0]
    if k == "const":
        return f"({e[1]})"
    if k == "var":
        return e[1]
    if k == "pid":
        return "pid"
    if k == "n":
        return "n"
    if k == "load":
        return f"dl.load(vals + ({_expr_src(e[1])} & {NVALS - 1}))"
    return f"({_expr_src(e[2])} {e[1]} {_expr_src(e[3])})"


def _cond_src(c) -> str:
    return f"{_expr_src(c[2])} {c[1]} {_expr_src(c[3])}"


def _block_src(stmts, indent) -> list[str]:
    pad = "    " * indent
    lines = []
    for s in stmts:
        k = s[0]
        if k == "set":
            lines.append(f"{pad}{s[1]} = {_expr_src(s[2])}")
        elif k == "add":
            lines.append(f"{pad}{s[1]} += {_expr_src(s[2])}")
        elif k == "tile":
            lines.append(f"{pad}t = dl.where(lanes < {_expr_src(s[1])}, t + 1, t - lanes)")
        elif k == "ftile":
            lines.append(f"{pad}f = f * 0.5 + {_expr_src(s[1])}")
        elif k == "atomic":
            lines.append(f"{pad}dl.atomic_add(cnt, {_expr_src(s[1])})")
        elif k == "store":
            lines.append(f"{pad}dl.store(out + pid * 4 + 3, {_expr_src(s[1])})")
        elif k in ("break", "continue", "return"):
            lines.append(f"{pad}{k}")
        elif k == "if":
            lines.append(f"{pad}if {_cond_src(s[1])}:")
            lines += _block_src(s[2], indent + 1)
            if s[3]:
                lines.append(f"{pad}else:")
                lines += _block_src(s[3], indent + 1)
        elif k == "for":
            _, i, lo, hi, step, body = s
            lines.append(f"{pad}for {i} in range({_expr_src(lo)}, {_expr_src(hi)}, {step}):")
            lines += _block_src(body, indent + 1)
        elif k == "static":
            _, i, count, body = s
            lines.append(f"{pad}for {i} in dl.static_range({count}):")
            lines += _block_src(body, indent + 1)
        else:
            _, w, count, body = s
            lines.append(f"{pad}{w} = 0")
            lines.append(f"{pad}while {w} < {count}:")
            lines.append(f"{pad}    {w} += 1")
            lines += _block_src(body, indent + 1)
    return lines


_sources = itertools.count()


def kernel_of(stmts):
    """The program as a ``@dvmlang.kernel``, exec'd from an in-memory file registered with linecache."""
    lines = ["@dvmlang.kernel",
             "def generated(out, fout, cnt, vals, n):",
             "    pid = dl.program_id(0)",
             "    a = pid",
             "    b = 0",
             "    lanes = dl.arange(0, 4)",
             "    t = dl.zeros((4,), dl.int32)",
             "    f = 0.0"]
    lines += _block_src(stmts, 1)
    lines += ["    dl.store(out + pid * 4, a)",
              "    dl.store(out + pid * 4 + 1, b)",
              "    dl.store(out + pid * 4 + 2, dl.sum(t, axis=0))",
              "    dl.store(fout + pid, f)"]
    text = "\n".join(lines) + "\n"
    name = f"<dvmlang-diff-control-{next(_sources)}>"
    linecache.cache[name] = (len(text), None, text.splitlines(True), name)
    scope = {"dvmlang": dvmlang, "dl": dl}
    exec(compile(text, name, "exec"), scope)
    return scope["generated"], text


# ---- the oracle ------------------------------------------------------------------------------------------
def _wrap(x: int) -> int:
    return (x + (1 << 31)) % (1 << 32) - (1 << 31)


class _Break(Exception):
    pass


class _Continue(Exception):
    pass


class _Return(Exception):
    pass


class Oracle:
    """Runs one program of the AST with Python ints (wrapped to int32), as docs/language.md defines it."""

    def __init__(self, pid, n, vals, out, fout, cnt):
        self.env = {"pid": pid, "a": pid, "b": 0}
        self.n, self.vals, self.out, self.fout, self.cnt = n, vals, out, fout, cnt
        self.t = np.zeros(TILE, np.int64)
        self.f = np.float32(0.0)

    def expr(self, e) -> int:
        k = e[0]
        if k == "const":
            return e[1]
        if k == "var":
            return self.env[e[1]]
        if k == "pid":
            return self.env["pid"]
        if k == "n":
            return self.n
        if k == "load":
            return int(self.vals[self.expr(e[1]) & (NVALS - 1)])
        x, y = self.expr(e[2]), self.expr(e[3])
        return _wrap({"+": x + y, "-": x - y, "^": x ^ y, "*": x * y}[e[1]])

    def cond(self, c) -> bool:
        x, y = self.expr(c[2]), self.expr(c[3])
        return {"<": x < y, "<=": x <= y, ">": x > y, ">=": x >= y, "==": x == y, "!=": x != y}[c[1]]

    def block(self, stmts):
        for s in stmts:
            self.stmt(s)

    def stmt(self, s):
        k = s[0]
        if k == "set":
            self.env[s[1]] = self.expr(s[2])
        elif k == "add":
            self.env[s[1]] = _wrap(self.env[s[1]] + self.expr(s[2]))
        elif k == "tile":
            lanes = np.arange(TILE)
            self.t = np.where(lanes < self.expr(s[1]), self.t + 1, self.t - lanes)
            self.t = (self.t + (1 << 31)) % (1 << 32) - (1 << 31)
        elif k == "ftile":
            self.f = np.float32(self.f * np.float32(0.5) + np.float32(self.expr(s[1])))
        elif k == "atomic":
            self.cnt[0] = _wrap(int(self.cnt[0]) + self.expr(s[1]))
        elif k == "store":
            self.out[self.env["pid"] * 4 + 3] = self.expr(s[1])
        elif k == "break":
            raise _Break
        elif k == "continue":
            raise _Continue
        elif k == "return":
            raise _Return
        elif k == "if":
            self.block(s[2] if self.cond(s[1]) else s[3])
        elif k == "for":
            _, i, lo, hi, step, body = s
            for v in range(self.expr(lo), self.expr(hi), step):
                self.env[i] = v
                if self.loop_body(body):
                    break
        elif k == "static":
            _, i, count, body = s
            for v in range(count):
                self.env[i] = v
                self.block(body)
        else:
            _, w, count, body = s
            self.env[w] = 0
            while self.env[w] < count:
                self.env[w] += 1
                if self.loop_body(body):
                    break

    def loop_body(self, body) -> bool:
        """Run one iteration; True if it ended in ``break``."""
        try:
            self.block(body)
        except _Break:
            return True
        except _Continue:
            pass
        return False

    def run(self, stmts):
        try:
            self.block(stmts)
        except _Return:
            return
        pid = self.env["pid"]
        self.out[pid * 4: pid * 4 + 3] = [self.env["a"], self.env["b"], _wrap(int(self.t.sum()))]
        self.fout[pid] = self.f


def oracle(stmts, grid, n, vals):
    out = np.full(4 * grid, -99, np.int64)
    fout = np.full(grid, -99.0, np.float32)
    cnt = np.zeros(1, np.int64)
    for pid in range(grid):
        Oracle(pid, n, vals, out, fout, cnt).run(stmts)
    return out, fout, cnt


def run_device(kernel, device, grid, n, vals):
    out = np.full(4 * grid, -99, np.int32)
    fout = np.full(grid, -99.0, np.float32)
    cnt = np.zeros(1, np.int32)
    v = vals.copy()
    rec = kernel[(grid,)](out, fout, cnt, v, n, device=device)
    np.testing.assert_array_equal(v, vals)  # the input the kernel only loads from is untouched
    return out, fout, cnt, rec.cycles


def check(stmts, grid, n, vals):
    kernel, text = kernel_of(stmts)
    want = oracle(stmts, grid, n, vals)
    runs = []
    for device, threads in ((BATCHED, False), (SEQUENTIAL, False), (STEPS, False), (BATCHED, True)):
        with side_by_side() if threads else contextlib.nullcontext():
            got = run_device(kernel, device, grid, n, vals)
        if runs:
            assert all(np.array_equal(g, r) for g, r in zip(got[:2], runs[0][:2])) and got[3] == runs[0][3], \
                f"{device} (threads: {threads}) differs from the compiled device: cycles {got[3]} against " \
                f"{runs[0][3]}\nkernel:\n{text}grid={grid} n={n}"
        runs.append(got)
        for name, g, w in zip(("out", "fout", "cnt"), got, want):
            if name == "fout":
                ok = np.allclose(g, w, rtol=1e-5, atol=1e-5)
            else:
                ok = np.array_equal(g.astype(np.int64), w)
            assert ok, f"{name} differs on {'sequential' if device.sequential else 'batched'} device:\n" \
                       f"got  {g.tolist()}\nwant {w.tolist()}\nkernel:\n{text}grid={grid} n={n} vals={vals.tolist()}"


@budget(200)
@given(stmts=programs(), grid=st.integers(1, 4), n=st.integers(-1, 4),
       vals=st.lists(st.integers(-4, 6), min_size=NVALS, max_size=NVALS).map(lambda v: np.array(v, np.int32)))
def test_control_flow_kernels_agree_with_the_oracle(stmts, grid, n, vals):
    check(stmts, grid, n, vals)
