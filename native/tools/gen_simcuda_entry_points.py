#!/usr/bin/env python3
"""Generate the simulated driver's alias wrappers, stubs and cuGetProcAddress table.

Sources of truth:
  - src/simcuda/simcuda_entry_points.txt: which hand-written entry points are
    also exported under other names (aliases: same parameters, same
    behaviour) and which names answer CUDA_ERROR_NOT_SUPPORTED;
  - the simulator's own sources: every `CUresult CUDAAPI cu...(` at the start
    of a line is a hand-written entry point;
  - cuda.h (preprocessed with __CUDA_API_VERSION_INTERNAL): the prototype of
    every exported symbol;
  - cudaTypedefs.h: the CUDA version that introduced each signature
    (PFN_<name>_v<version>[_ptsz|_ptds]). A name's versions, oldest first,
    pair with its exported symbols in cuda.h, oldest first (plain, _v2,
    _v3, ...; the per-thread ones apart); the compiler checks each pairing
    against the PFN typedef.

    gen_simcuda_entry_points.py [--cuda-include DIR] [--cc CC] [--list FILE]
                                (--aliases FILE | --table FILE) SOURCE.c...

--aliases writes the wrappers and stubs (a C file), --table the rows of the
cuGetProcAddress table (included by simcuda_procaddr.c).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from dataclasses import dataclass

from cuda_header import PROTOTYPE, base_name, cuda_version, param_name, preprocess, split_params

HAND_WRITTEN = re.compile(r"^CUresult CUDAAPI (cu\w+)\(", re.MULTILINE)
PFN = re.compile(r"\*\s*PFN_(cu[A-Za-z0-9]+)_v(\d+)(_ptsz|_ptds)?\s*\)")
PER_THREAD = ("_ptsz", "_ptds")


def fail(message: str) -> None:
    raise SystemExit(f"gen_simcuda_entry_points: {message}")


@dataclass(frozen=True)
class Declared:
    aliases: dict[str, str]  # alias -> hand-written entry point it calls
    unsupported: list[str]


def read_list(path: str) -> Declared:
    aliases: dict[str, str] = {}
    unsupported: list[str] = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            words = line.split("#", 1)[0].split()
            if not words:
                continue
            if words[0] == "alias" and len(words) >= 3:
                for suffix in words[2:]:
                    aliases[words[1] + suffix] = words[1]
            elif words[0] == "unsupported" and len(words) >= 2:
                unsupported += words[1:]
            else:
                fail(f"{path}:{number}: expected `alias NAME SUFFIX...` or `unsupported NAME...`")
    return Declared(aliases, unsupported)


def hand_written(sources: list[str]) -> set[str]:
    names: set[str] = set()
    for path in sources:
        with open(path, encoding="utf-8") as f:
            names.update(HAND_WRITTEN.findall(f.read()))
    return names


def param_types(params: str, where: str) -> tuple[str, ...]:
    plist = [] if params in ("", "void") else split_params(params)
    return tuple(re.sub(rf"\b{param_name(p, where)}\b", "", p).replace(" ", "") for p in plist)


def version_order(name: str) -> int:
    m = re.search(r"_v(\d+)$", re.sub(r"_(ptsz|ptds)$", "", name))
    return int(m.group(1)) if m else 1


def check(declared: Declared, hand: set[str], protos: dict[str, str]) -> None:
    seen = set(hand)
    for name in list(declared.aliases) + declared.unsupported:
        if name not in protos:
            fail(f"{name} is not declared in cuda.h")
        if name in seen:
            fail(f"{name} is exported twice (written by hand or listed before)")
        seen.add(name)
    for alias, target in declared.aliases.items():
        if target not in hand:
            fail(f"alias {alias}: {target} is not written by hand in the simulator's sources")
        if param_types(protos[alias], alias) != param_types(protos[target], target):
            fail(f"alias {alias}: its parameters differ from {target}'s in cuda.h")


def symbol_versions(names: set[str], protos: dict[str, str], pfn: dict[str, list[tuple[int, str]]]) -> dict[str, int]:
    """The CUDA version of each exported symbol's signature, from cudaTypedefs.h."""
    versions: dict[str, int] = {}
    for base in sorted({base_name(n) for n in names}):
        for pt in ("", "_pt"):
            symbols = sorted((s for s in protos if base_name(s) == base and s.endswith(PER_THREAD) == bool(pt)),
                             key=version_order)
            vers = sorted(v for v, suffix in pfn.get(base, []) if bool(suffix) == bool(pt))
            if not any(s in names for s in symbols):
                continue
            if len(symbols) != len(vers):
                fail(f"{base}: cuda.h exports {symbols}, cudaTypedefs.h has versions {vers}")
            versions.update(zip(symbols, vers))
    return versions


def pfn_versions(text: str) -> dict[str, list[tuple[int, str]]]:
    out: dict[str, list[tuple[int, str]]] = {}
    for base, version, suffix in set(PFN.findall(text)):
        out.setdefault(base, []).append((int(version), suffix))
    return out


def banner(what: str, version: str) -> list[str]:
    return [
        "/*",
        f" * GENERATED by native/tools/gen_simcuda_entry_points.py: {what}",
        f" * From src/simcuda/simcuda_entry_points.txt, cuda.h and cudaTypedefs.h (CUDA_VERSION {version}).",
        " * Do not edit: it is written again at each build.",
        " */",
    ]


def render_aliases(declared: Declared, protos: dict[str, str], version: str) -> str:
    out = banner("alias wrappers and unsupported stubs.", version) + [
        '#include "simcuda_internal.h"',
        "",
        '#pragma GCC diagnostic ignored "-Wunused-parameter"',
        "",
    ]
    for alias, target in sorted(declared.aliases.items()):
        params = protos[alias]
        plist = [] if params in ("", "void") else split_params(params)
        args = ", ".join(param_name(p, alias) for p in plist)
        out += [f"CUresult CUDAAPI {alias}({params})", "{", f"    return {target}({args});", "}", ""]
    for name in sorted(declared.unsupported):
        out += [f"CUresult CUDAAPI {name}({protos[name]})", "{", "    return CUDA_ERROR_NOT_SUPPORTED;", "}", ""]
    return "\n".join(out)


def render_table(exported: set[str], versions: dict[str, int], version: str) -> str:
    out = banner("rows of the cuGetProcAddress table.", version)
    out.append("/* ROW(name, version, symbol) / ROW_PT(..., per-thread version, per-thread symbol) */")
    rows = sorted((base_name(s), versions[s], s) for s in exported if not s.endswith(PER_THREAD))
    twins = {s[:-5]: s for s in exported if s.endswith(PER_THREAD)}
    for base, ver, symbol in rows:
        twin = twins.pop(symbol, None)
        if twin is None:
            out.append(f"ROW({base}, {ver}, {symbol}),")
        else:
            out.append(f"ROW_PT({base}, {ver}, {symbol}, {versions[twin]}{twin[-5:]}, {twin}),")
    if twins:
        fail(f"per-thread symbols without their plain one: {sorted(twins.values())}")
    return "\n".join(out) + "\n"


def write(path: str, text: str) -> None:
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def main() -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cuda-include", default=os.environ.get("CUDA_INCLUDE", "/usr/local/cuda/include"))
    ap.add_argument("--cc", default=os.environ.get("CC", "cc"))
    ap.add_argument("--list", default=os.path.join(here, "..", "src", "simcuda", "simcuda_entry_points.txt"))
    out = ap.add_mutually_exclusive_group(required=True)
    out.add_argument("--aliases", metavar="FILE")
    out.add_argument("--table", metavar="FILE")
    ap.add_argument("sources", nargs="+", help="the simulator's hand-written C sources")
    ns = ap.parse_args()

    text = preprocess(ns.cc, ns.cuda_include, ("cuda.h", "cudaTypedefs.h"))
    protos = {m.group(1): " ".join(m.group(2).split()) for m in PROTOTYPE.finditer(text)}
    declared = read_list(ns.list)
    hand = hand_written(ns.sources)
    check(declared, hand, protos)
    version = cuda_version(ns.cuda_include)
    if ns.aliases:
        write(ns.aliases, render_aliases(declared, protos, version))
        return 0
    exported = hand | set(declared.aliases) | set(declared.unsupported)
    write(ns.table, render_table(exported, symbol_versions(exported, protos, pfn_versions(text)), version))
    return 0


if __name__ == "__main__":
    sys.exit(main())
