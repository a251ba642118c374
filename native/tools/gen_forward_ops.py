#!/usr/bin/env python3
"""Generate both sides of forwarded mode's one-shape operations from the op
table (tools/forward_ops.py):

  src/forward/client_ops_gen.c    the client's entry points: pack the
                                  parameters into a request, wait for the
                                  reply where the table says so, write the
                                  out parameters
  src/forward/server_ops_gen.inc  the server's execution of the same
                                  requests: check the command's handles and
                                  ranges, call the driver, fill the reply;
                                  included by server_exec.c, whose state
                                  (the command's handles) it reads and whose
                                  table of operations it joins

The table's operations are checked against include/krex_forward.h (the
operation must exist there, and the driver entry point the server calls is
the one the header names).

    gen_forward_ops.py [--check]

--check exits 1 when a generated file differs from what would be generated.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from typing import NoReturn

from forward_ops import BY_HAND, OPS, Entry, Op
from generated_file import write_or_check

NATIVE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLIENT = os.path.join(NATIVE, "src", "forward", "client_ops_gen.c")
SERVER = os.path.join(NATIVE, "src", "forward", "server_ops_gen.inc")
HEADER = os.path.join(NATIVE, "include", "krex_forward.h")
SOURCE = "tools/forward_ops.py"

# Handles travel as their pointer value; the server checks each against the
# command's own (a stream: or a default stream).
HANDLE_CHECKS = {
    "CUfunction": "known_function({})",
    "CUstream": "known_stream({})",
    "CUevent": "known(&events, {})",
    "CUmodule": "known(&modules, {})",
    "CUgraph": "known(&graphs, {})",
    "CUgraphExec": "known(&graph_execs, {})",
}
HANDLES = set(HANDLE_CHECKS) | {"CUcontext"}


def fail(message: str) -> NoReturn:
    print(f"gen_forward_ops.py: {message}", file=sys.stderr)
    sys.exit(2)


def split_param(param: str) -> tuple[str, str]:
    """("int *", "pi") for "int *pi"."""
    m = re.fullmatch(r"(.*?[\s*])(\w+)", param)
    if m is None:
        fail(f"cannot read the parameter {param!r}")
    return m.group(1).strip(), m.group(2)


def pointee(ctype: str) -> str:
    if not ctype.endswith("*"):
        fail(f"an out parameter of type {ctype!r} is not a pointer")
    return ctype[:-1].strip()


def params_of(e: Entry) -> dict[str, str]:
    return {name: ctype for ctype, name in map(split_param, e.params)}


def to_wire(ctype: str, expr: str) -> str:
    return f"(uint64_t)(uintptr_t){expr}" if ctype in HANDLES else f"(uint64_t){expr}"


def from_wire(ctype: str, expr: str) -> str:
    return f"({ctype})(uintptr_t){expr}" if ctype in HANDLES else f"({ctype}){expr}"


def header_ops() -> dict[str, str]:
    with open(HEADER, encoding="utf-8") as f:
        return dict(re.findall(r'X\((\w+), "(\w+)"\)', f.read()))


def check_table(ops: tuple[Op, ...]) -> None:
    named = header_ops()
    described = [op.name for op in ops] + list(BY_HAND)
    missing = sorted(set(named) - set(described))
    twice = sorted({name for name in described if described.count(name) > 1})
    if missing or twice:
        fail(f"every operation of include/krex_forward.h once in OPS or BY_HAND: missing {missing}, twice {twice}")
    for op in ops:
        if op.name not in named:
            fail(f"{op.name} is not an operation of include/krex_forward.h")
        if op.server and op.server != named[op.name]:
            fail(f"{op.name} calls {op.server}, but include/krex_forward.h names {named[op.name]}")
        for e in op.entries:
            params = params_of(e)
            for slot in op.slots:
                if (slot in params) == (slot in e.fixed):
                    fail(f"{e.name}: request slot {slot} needs a parameter or a fixed value, not both")
            for out in op.outs:
                if out not in params:
                    fail(f"{e.name}: no out parameter {out}")


# ---- the client --------------------------------------------------------------------


def client_entry(op: Op, e: Entry, name: str, flags: str) -> list[str]:
    params = params_of(e)
    args = [to_wire(params[s], s) if s in params else f"(uint64_t){e.fixed[s]}" for s in op.slots]
    argv = f"ARGS({', '.join(args)})" if args else "NULL, 0"
    lines = [f"FWD_EXPORT CUresult CUDAAPI {name}({', '.join(e.params) or 'void'})", "{"]
    if op.need_init:
        lines.append("    NEED_INIT();")
    if op.outs:
        tests = " || ".join(f"{o} == NULL" for o in op.outs)
        lines += [f"    if ({tests})", "        return CUDA_ERROR_INVALID_VALUE;"]
    if not op.reply:
        lines += [f"    return fwd_call(KREX_FWD_OP_{op.name}, {flags}, {argv}, NULL, 0, NULL, 0, NULL);", "}"]
        return lines
    lines.append("    struct fwd_reply r = {0};")
    lines.append(f"    CUresult rc = fwd_call(KREX_FWD_OP_{op.name}, {flags}, {argv}, NULL, 0, NULL, 0, &r);")
    done = []
    for i, out in enumerate(op.outs):
        ctype = pointee(params[out])
        if ctype == "float":
            done += [f"        uint32_t bits = (uint32_t)r.out[{i}];", f"        memcpy({out}, &bits, sizeof bits);"]
        else:
            done.append(f"        *{out} = {from_wire(ctype, f'r.out[{i}]')};")
    if op.after:
        done.append(f"        {op.after}")
    if done:
        lines += ["    if (rc == CUDA_SUCCESS) {", *done, "    }"]
    lines += ["    return rc;", "}"]
    return lines


def render_client(ops: tuple[Op, ...]) -> str:
    lines = [
        f"/* Generated by tools/gen_forward_ops.py from {SOURCE}: do not edit. */",
        "/*",
        " * The forwarding client's entry points of one shape: each packs its",
        " * parameters into a request and, where it waits for the reply, writes its",
        " * out parameters from the reply's values. The others are client_api.c's.",
        " */",
        '#include "client.h"',
        "",
        "#include <string.h>",
    ]
    for op in ops:
        for e in op.entries:
            lines += ["", *client_entry(op, e, e.name, "0")]
            if op.per_thread:
                lines += ["", *client_entry(op, e, e.name + op.per_thread, "KREX_FWD_PER_THREAD")]
    return "\n".join(lines) + "\n"


# ---- the server --------------------------------------------------------------------


def server_op(op: Op) -> list[str]:
    main = op.entries[0]
    params = params_of(main)
    slot = {s: f"a[{i}]" for i, s in enumerate(op.slots)}
    lines = [f"static CUresult exec_{op.name}(struct request *q)", "{"]
    if any(name in slot for name in params):
        lines.append("    const uint64_t *a = q->a;")
    if op.ranges:
        owned = " || ".join(f"!owned({slot[p]}, {slot[n]})" for p, n in op.ranges)
        lines += [f"    if ({owned})", "        return CUDA_ERROR_INVALID_VALUE;"]
    checks = []
    for name, ctype in params.items():
        if name in slot and ctype in HANDLES:
            if ctype not in HANDLE_CHECKS:
                fail(f"{op.name}: the server cannot check a {ctype} (write its case by hand)")
            forgotten = op.forgets and name == op.slots[0]
            checks.append(f"known(&{op.forgets}, {slot[name]})" if forgotten else HANDLE_CHECKS[ctype].format(slot[name]))
    if checks:
        test = f"!({' && '.join(checks)})" if len(checks) > 1 else f"!{checks[0]}"
        lines += [f"    if ({test})", "        return CUDA_ERROR_INVALID_HANDLE;"]
    call = []
    for name, ctype in params.items():
        if name in op.outs:
            lines.append(f"    {pointee(ctype)} got_{name} = 0;")
            call.append(f"&got_{name}")
        else:
            call.append(from_wire(ctype, slot[name]))
    fn = f"PICK(q->pt, p_{op.server}, p_{op.server}{op.per_thread})" if op.per_thread else f"p_{op.server}"
    lines.append(f"    CUresult r = CALL({', '.join([fn, *call])});")
    if op.creates:
        listed, destroy = op.creates
        made = f"got_{op.outs[0]}"
        lines += [
            f"    if (r == CUDA_SUCCESS && !remember(&{listed}, (uint64_t)(uintptr_t){made})) {{",
            f"        CALL(p_{destroy}, {made});",
            "        r = CUDA_ERROR_OUT_OF_MEMORY;",
            "    }",
        ]
    if op.forgets:
        lines += ["    if (r == CUDA_SUCCESS)", f"        forget(&{op.forgets}, a[0]);"]
    for i, out in enumerate(op.outs):
        ctype = pointee(params[out])
        if ctype == "float":
            lines += ["    uint32_t bits;", f"    memcpy(&bits, &got_{out}, sizeof bits);", f"    q->out[{i}] = bits;"]
        elif op.creates and i == 0:
            lines.append(f"    q->out[{i}] = r == CUDA_SUCCESS ? {to_wire(ctype, 'got_' + out)} : 0;")
        else:
            lines.append(f"    q->out[{i}] = {to_wire(ctype, 'got_' + out)};")
    if op.outs:
        lines.append(f"    q->nout = {len(op.outs)};")
    lines += ["    return r;", "}"]
    return lines


def render_server(ops: tuple[Op, ...]) -> str:
    served = [op for op in ops if op.server]
    lines = [
        f"/* Generated by tools/gen_forward_ops.py from {SOURCE}: do not edit. */",
        "/*",
        " * The context server's execution of the one-shape operations, included by",
        " * server_exec.c (it uses that file's state: the command's handles and",
        " * regions, the driver's entry points, struct request). Each checks what",
        " * the command sent, calls the driver and fills the reply's values;",
        " * GENERATED_OPS is their part of server_exec.c's table of operations.",
        " */",
    ]
    for op in served:
        lines += ["", *server_op(op)]
    lines += ["", "#define GENERATED_OPS \\"]
    lines += [f"    [KREX_FWD_OP_{op.name}] = exec_{op.name}, \\" for op in served]
    lines[-1] = lines[-1].removesuffix(" \\")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--check", action="store_true", help="compare with the files in the tree instead of writing them")
    ns = ap.parse_args()
    check_table(OPS)
    rc = write_or_check(CLIENT, render_client(OPS), SOURCE, ns.check, "the client's one-shape entry points")
    rc |= write_or_check(SERVER, render_server(OPS), SOURCE, ns.check, "the server's one-shape operations")
    return rc


if __name__ == "__main__":
    sys.exit(main())
