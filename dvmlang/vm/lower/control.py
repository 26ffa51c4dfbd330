"""Instruction selection for structured control flow: ``for``/``while``/``if``/``scope`` and their exits
(``yield``, ``break``, ``continue``, ``return``), which move the values they carry into the homes of the
construct's results as one parallel move."""

from __future__ import annotations

from ... import dtypes as dt
from ...errors import CompilationError
from ...ir.core import Op, Value, ends_in_exit
from .. import isa
from .program import Buffer, Label, Place, nbytes

BY_NAME = isa.BY_NAME


class _Scope:
    """A loop or scope being lowered: where exits jump and which homes they fill."""

    def __init__(self, op: Op, exit_label: Label, cont_label: Label | None, homes: list):
        self.op = op
        self.exit_label = exit_label
        self.cont_label = cont_label
        self.homes = homes


def _jump(ctx, target: Label, loc):
    j = ctx.emit(BY_NAME["JMP"], {"target": 0}, None, loc)
    j.target = target


def _branch_if_zero(ctx, rc: int, target: Label, loc):
    e = ctx.emit(BY_NAME["BRZ"], {"rc": rc, "target": 0}, None, loc)
    e.target = target


def _move(ctx, dst_home, src: Value, loc):
    """Copy ``src`` into a home (register or buffer) unless it already lives there."""
    if isinstance(dst_home, Buffer):
        p = ctx.place(src)
        if p.buf is dst_home:
            return
        ref_dst = ctx.tile_ref(dst_home.addr, src.dtype, src.shape)
        dst_rng = (dst_home.space, dst_home.addr, dst_home.addr + dst_home.nbytes)
        if dst_home.space == "l0c" and src.op is not None and src.op.kind == "full":
            ctx.emit(BY_NAME["L0C_FILL"], {"dst": ref_dst, "rs": ctx.reg(src.op.operands[0])}, src.dtype, loc,
                     writes=[dst_rng])
            return
        if dst_home.space == "l0c":
            ctx.emit(BY_NAME["UB_TO_L0C"], {"dst": ref_dst, "src": ctx.tile(src)}, src.dtype, loc,
                     reads=[ctx.rng(src)], writes=[dst_rng])
            return
        if dst_home.space == "l1":  # a branch result that only feeds a dot (access.py's guarded DMA / gather)
            ctx.emit(BY_NAME["UB_TO_L1"], {"dst": ref_dst, "src": ctx.tile(src)}, src.dtype, loc,
                     reads=[ctx.rng(src)], writes=[dst_rng])
            return
        ctx.emit(BY_NAME["VCOPY"], {"dst": ref_dst, "a": ctx.tile(src)}, src.dtype, loc,
                 reads=[ctx.rng(src)], writes=[dst_rng])
    else:
        rd = dst_home
        rs = ctx.reg(src)
        if rd != rs:
            ctx.emit(BY_NAME["MOV"], {"rd": rd, "rs": rs}, src.dtype, loc)


def _home_targets(ctx, op: Op) -> list:
    homes = ctx.plan.homes[id(op)]
    out = []
    for i, h in enumerate(homes):
        if isinstance(h, Buffer):
            out.append(h)
        else:
            out.append(ctx.regs.of_key[("home", id(op), i)])
    return out


def _parallel_move(ctx, homes, values, loc):
    """Move values into homes as if all at once (a value may itself sit in another home)."""
    pending = [(h, v) for h, v in zip(homes, values) if not _already(ctx, h, v)]
    if not pending:
        return
    # Values that live in a home which is overwritten earlier must be saved first.
    dests = [h for h, _ in pending]
    safe = []
    for i, (h, v) in enumerate(pending):
        src_home = ctx.place(v).buf if v.is_tile else ctx.reg(v)
        clobbered = any(src_home is d or (isinstance(d, int) and d == src_home) for d in dests[:i])
        if clobbered:
            v = _save_temp(ctx, v, loc)
        safe.append((h, v))
    for h, v in safe:
        _move(ctx, h, v, loc)


def _already(ctx, h, v) -> bool:
    if isinstance(h, Buffer):
        return ctx.place(v).buf is h
    return ctx.reg(v) == h


def _save_temp(ctx, v: Value, loc) -> Value:
    """Copy a value whose place a parallel move overwrites (``a, b = b, a`` in a loop) to a temporary."""
    tmp = Value(v.type)
    if v.is_tile:
        nb = nbytes(v.shape, v.dtype)
        buf = Buffer("ub", nb, 0, 0, "swap", loc, ctx.staging.swap_addr(nb))
        ctx.plan.places[tmp.id] = Place("ub", buf, v.shape, v.dtype)
        _move(ctx, buf, v, loc)
    else:
        r = ctx.regs.extra(v.dtype)
        ctx.regs.of_value[tmp.id] = r
        ctx.emit(BY_NAME["MOV"], {"rd": r, "rs": ctx.reg(v)}, v.dtype, loc)
    return tmp


def _for(ctx, op):
    lb, ub, step = op.operands[:3]
    inits = op.operands[3:]
    body = op.regions[0]
    homes = _home_targets(ctx, op)
    iv = body.args[0]
    iv_reg = ctx.reg(iv)
    _parallel_move(ctx, homes, inits, op.loc)
    ctx.emit(BY_NAME["MOV"], {"rd": iv_reg, "rs": ctx.reg(lb)}, iv.dtype, op.loc)
    head, exit_ = Label("head"), Label("exit")
    cond = _loop_cond_reg(ctx, op)
    copies = 2 if id(op) in ctx.plan.unrolled else 1
    out = ctx.code.out
    out.append(head)
    for copy in range(copies):
        latch = Label("latch")
        # cond = step > 0 ? iv < ub : iv > ub
        _range_cond(ctx, cond, iv_reg, ctx.reg(ub), step, op.loc, iv.dtype)
        _branch_if_zero(ctx, cond, exit_, op.loc)
        ctx.scopes.append(_Scope(op, exit_, latch, homes))
        saved = ctx.alt_active
        ctx.alt_active = saved or copy == 1
        try:
            ctx.emit_ops(body.ops)
        finally:
            ctx.alt_active = saved
            ctx.scopes.pop()
        out.append(latch)
        ctx.emit(isa.SCALAR_BINARY["add"], {"rd": iv_reg, "ra": iv_reg, "rb": ctx.reg(step)}, iv.dtype, op.loc)
    _jump(ctx, head, op.loc)
    out.append(exit_)
    for home, shadow, res in ctx.plan.l0c_shadow.get(id(op), []):
        ctx.emit(BY_NAME["FIX_L0C_TO_UB"],
                 {"dst": ctx.tile_ref(shadow.addr, res.dtype, res.shape),
                  "src": ctx.tile_ref(home.addr, res.dtype, res.shape)}, res.dtype, op.loc,
                 reads=[("l0c", home.addr, home.addr + home.nbytes)],
                 writes=[("ub", shadow.addr, shadow.addr + shadow.nbytes)])


def _loop_cond_reg(ctx, op) -> int:
    key = ("cond", id(op))
    r = ctx.regs.of_key.get(key)
    if r is None:
        r = ctx.regs.extra(dt.bool_)
        ctx.regs.of_key[key] = r
    return r


def _range_cond(ctx, cond, iv_reg, ub_reg, step: Value, loc, idt):
    scmp = BY_NAME["SCMP"]
    if step.op is not None and step.op.kind == "const":
        cc = "lt" if step.op.attrs["value"] > 0 else "gt"
        ctx.emit(scmp, {"rd": cond, "ra": iv_reg, "rb": ub_reg, "cc": isa.CC_NAMES.index(cc)}, idt, loc)
        return
    # runtime step: (step > 0 and iv < ub) or (step < 0 and iv > ub)
    extra = ctx.regs.extra
    t1, t2, t3 = extra(dt.bool_), extra(dt.bool_), extra(dt.bool_)
    zero = extra(idt)
    ctx.emit(BY_NAME["MOVI"], {"rd": zero, "imm": 0}, idt, loc)
    ctx.emit(scmp, {"rd": t1, "ra": ctx.reg(step), "rb": zero, "cc": isa.CC_NAMES.index("gt")}, idt, loc)
    ctx.emit(scmp, {"rd": t2, "ra": iv_reg, "rb": ub_reg, "cc": isa.CC_NAMES.index("lt")}, idt, loc)
    ctx.emit(scmp, {"rd": t3, "ra": iv_reg, "rb": ub_reg, "cc": isa.CC_NAMES.index("gt")}, idt, loc)
    ctx.emit(BY_NAME["SSEL"], {"rd": cond, "rc": t1, "ra": t2, "rb": t3}, dt.bool_, loc)


def _while(ctx, op):
    inits = op.operands
    cond_block, body = op.regions
    homes = _home_targets(ctx, op)
    _parallel_move(ctx, homes, inits, op.loc)
    head, exit_ = Label("head"), Label("exit")
    ctx.code.out.append(head)
    term = cond_block.terminator
    ctx.emit_ops(cond_block.ops[:-1] if term is not None else cond_block.ops)  # the final yield is the branch
    _branch_if_zero(ctx, ctx.reg(term.operands[0]), exit_, op.loc)
    ctx.scopes.append(_Scope(op, exit_, head, homes))
    ctx.emit_ops(body.ops)
    ctx.scopes.pop()
    ctx.code.out.append(exit_)


def _if(ctx, op):
    cond = op.operands[0]
    then_b, else_b = op.regions
    homes = _home_targets(ctx, op) if op.results else []
    else_l, end_l = Label("else"), Label("endif")
    _branch_if_zero(ctx, ctx.reg(cond), else_l, op.loc)
    ctx.scopes.append(_Scope(op, end_l, None, homes))
    ctx.emit_ops(then_b.ops)
    if not ends_in_exit(then_b):
        _jump(ctx, end_l, op.loc)
    ctx.code.out.append(else_l)
    ctx.emit_ops(else_b.ops)
    ctx.scopes.pop()
    ctx.code.out.append(end_l)


def _scope(ctx, op):
    homes = _home_targets(ctx, op) if op.results else []
    end_l = Label("endscope")
    ctx.scopes.append(_Scope(op, end_l, None, homes))
    ctx.emit_ops(op.regions[0].ops)
    ctx.scopes.pop()
    ctx.code.out.append(end_l)


def _yield(ctx, op):
    parent = op.parent.parent
    sc = _scope_for(ctx, parent)
    if parent.kind == "while" and op.parent is parent.regions[0]:
        return  # the condition block's yield is consumed by the branch in _while
    _parallel_move(ctx, sc.homes, op.operands, op.loc)
    if parent.kind == "while":
        _jump(ctx, sc.cont_label, op.loc)
    # for: fall through to the latch


def _scope_for(ctx, op: Op) -> _Scope:
    for sc in reversed(ctx.scopes):
        if sc.op is op:
            return sc
    raise CompilationError("internal: exit target not found", op.loc)


def _break(ctx, op):
    sc = _scope_for(ctx, op.attrs["target"])
    _parallel_move(ctx, sc.homes, op.operands, op.loc)
    _jump(ctx, sc.exit_label, op.loc)


def _continue(ctx, op):
    sc = _scope_for(ctx, op.attrs["target"])
    _parallel_move(ctx, sc.homes, op.operands, op.loc)
    _jump(ctx, sc.cont_label, op.loc)


def _return(ctx, op):
    target = op.attrs.get("target")
    if target is None:
        _jump(ctx, ctx.code.end_label, op.loc)
        return
    _break(ctx, op)


EMITTERS = {
    "for": _for, "while": _while, "if": _if, "scope": _scope, "yield": _yield, "break": _break,
    "continue": _continue, "return": _return,
}
