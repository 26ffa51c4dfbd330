"""A program's encodes written out in its instance function (``instance._Generator``, when ``instance.INLINE``):
the words ``Encoder.encode_values`` writes for each kernel, as straight-line code over the call's sizes."""

from __future__ import annotations

import re

from ..vm import bytecode


def encode_all(w, encodes: list) -> bool:
    """Into writer ``w``, the program's encodes, written out (``inline``): every distinct value the sizes decide
    computed once (a scalar argument's bits, an array's parameter-table key and global-memory span), one range
    check of the size arguments, then per kernel a copy of its words (the build's template with every word the
    program fixes already written: constant scalars, the first tensor's address), the words the sizes decide
    written in place (each scalar's MOVI immediate, each tensor's address: tensors one after another,
    ``gm_span``) and the instance made around them. The words are those ``Encoder.encode_values`` writes; no
    kernel-level instance key is built (the program keeps its instances by the sizes, ``SIZED``). False: a case
    it does not cover (the generic path runs, and reports it)."""
    names: dict = {}  # an expression -> the variable holding it

    def val(e: str) -> str:
        v = names.get(e)
        if v is None:
            v = names[e] = f"x{len(names)}"
            w(f"{v} = {e}")
        return v

    ints: list[str] = []
    for tag, gk, build, exprs, arrays, _ in encodes:
        for i in build.int_args:
            e = exprs[i]
            v = _literal(e)
            if v is None:
                if val(e) not in ints:
                    ints.append(val(e))
            elif not -(1 << 31) <= v < 1 << 31:
                return False  # (the generic path reports it)
    if ints:
        hi, lo = (f"max({', '.join(ints)})", f"min({', '.join(ints)})") if len(ints) > 1 else (ints[0], ints[0])
        w(f"if {hi} > {(1 << 31) - 1} or {lo} < {-(1 << 31)}:")
        w("    return None")
    for tag, gk, build, exprs, arrays, fixed in encodes:
        enc = build.encoder
        slots, tensors, ranks = enc._patch_tables
        words = enc._words[:]
        for wd, p, d in slots:
            v = _literal(exprs[p])
            if v is not None:
                words[wd] = bytecode._CONVERTERS[d](v)
        w.const(f"W{tag}", words)
        w.const(f"E{tag}", enc)
        body = [f"code = W{tag}[:]"]
        other = []  # the constants' words when the call gives other values (a lazy program reused)
        for wd, p, d in slots:
            e = exprs[p]
            if _literal(e) is not None:
                continue
            if e in fixed:  # a graph constant: its value's bits in the template, others written per call
                words[wd] = bytecode._CONVERTERS[d](fixed[e])
                w.const(f"CV{d.name}", bytecode._CONVERTERS[d])
                other.append(f"    code[{wd}] = CV{d.name}({e})")
                continue
            if d.is_float or not d.is_int:
                w.const(f"CV{d.name}", bytecode._CONVERTERS[d])
                body.append(f"code[{wd}] = {val(f'CV{d.name}({e})')}")
            else:
                mask = (1 << (d.itemsize * 8)) - 1
                x = val(f"int({e})") if _NOT_INT.search(e) else val(e)  # (a constant: a numpy scalar)
                body.append(f"code[{wd}] = {val(f'{x} & {mask}')}")
        first = True
        for n, (i, _, itemsize, tw) in enumerate(tensors):
            if first:
                for x in tw:
                    words[x] = bytecode.GM_BASE
            else:
                body += [f"code[{x}] = cur" for x in tw]
            if n + 1 < len(tensors):
                if ranks[i] > 1:
                    return False
                count = f"(len({arrays[i]}) or 1)" if ranks[i] else "1"
                span = val(f"({count} * {itemsize} + {bytecode.GM_ALIGN - 1}) & {-bytecode.GM_ALIGN}")
                body.append(f"cur = {bytecode.GM_BASE} + {span}" if first else f"cur += {span}")
                first = False
        if other:
            body += ["if consts is not None:"] + other
        keys = ", ".join(val(f"({arrays[i]}.dtype, {arrays[i]}.shape, {arrays[i]}.strides)") if i in arrays
                         else "None" for i in range(len(exprs)))
        body.append(f"bc{tag} = E{tag}._instance(code, ({keys},), None, lg{tag})")
        w.const(f"GS{tag}", gk.stats)
        body += [f"GS{tag}.encodes += 1", f"GS{tag}.launches += 1"]
        if gk.sink is not None:
            w.const(f"SINK{tag}", gk.sink)
            body.append(f"SINK{tag}.encodes += 1")
        for line in body:
            w(line)
    return True


def _literal(e: str):
    """The value of an argument expression that has no variables (``512``, ``float(64)``), else None."""
    if _LITERAL.fullmatch(e):
        return eval(e, {"max": max, "float": float})  # noqa: S307 - digits, operators, max and float only
    return None


_LITERAL = re.compile(r"(?:[0-9\s+\-*/().,]|float|max)+")
# a graph constant (a numpy scalar) or a float in an argument expression: written through int(), as the encoder does
_NOT_INT = re.compile(r"\bc\d+_\d+\[|float\(")
