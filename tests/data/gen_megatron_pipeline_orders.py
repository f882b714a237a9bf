"""Generate tests/data/megatron_pipeline_orders.json by running Megatron-LM's own schedule functions.

Not part of the project and not run by the tests: it reads Megatron-LM's
``megatron/core/pipeline_parallel/schedules.py`` from a checkout given on the
command line, extracts the two pure functions ``get_pp_rank_microbatches`` and
``get_schedule_table`` with ``ast`` and executes them unchanged (no torch
needed). The op order is then rebuilt the way
``forward_backward_pipelining_with_interleaving`` walks them: warm-up forwards
``k < W``, steady pairs (forward ``k + W``, backward ``k``), cool-down
backwards; the chunk of backward ``k`` is ``v − 1 − chunk_table[k]`` and its
microbatch is the next one of that chunk's forwards (Megatron pops its
activation queue first in, first out). Without interleaving
(``forward_backward_pipelining_without_interleaving``) ``W = min(pp − rank − 1, m)``.

Usage (commit d98e8a64ddf34856e74b24714e3bedb2f5a39553 was used)::

    git -C Megatron-LM show HEAD:megatron/core/pipeline_parallel/schedules.py > /tmp/schedules.py
    python tests/data/gen_megatron_pipeline_orders.py /tmp/schedules.py <commit> tests/data/megatron_pipeline_orders.json
"""

from __future__ import annotations

import ast
import json
import sys
import types
from typing import Optional

CASES = [(2, 1, 4, None), (4, 1, 6, None), (4, 1, 2, None), (2, 2, 4, None), (4, 2, 8, None), (4, 3, 8, None),
         (3, 2, 6, None), (2, 2, 5, 3), (4, 2, 12, 4), (4, 4, 4, None), (8, 2, 16, None), (4, 2, 10, 5), (4, 2, 9, 5)]


def load_functions(path: str) -> dict:
    ns: dict = {"Optional": Optional, "P2PCommunicator": object, "parallel_state": None}
    tree = ast.parse(open(path).read())
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in ("get_pp_rank_microbatches", "get_schedule_table"):
            exec(compile(ast.Module(body=[node], type_ignores=[]), "schedules.py", "exec"), ns)  # noqa: S102
    return ns


class _Group:
    def __init__(self, n: int, r: int) -> None:
        self.n, self.r = n, r

    def size(self) -> int:
        return self.n

    def rank(self) -> int:
        return self.r


def order(ns: dict, pp: int, rank: int, m: int, v: int, group: int) -> list[tuple[str, int, int]]:
    if v == 1:
        w = min(pp - rank - 1, m)
        steady = [x for k in range(m - w) for x in (("F", k + w, 0), ("B", k, 0))]
        return [("F", k, 0) for k in range(w)] + steady + [("B", k, 0) for k in range(m - w, m)]
    comm = types.SimpleNamespace(pp_group=_Group(pp, rank), virtual_pipeline_model_parallel_size=v)
    total, _, w, rem = ns["get_pp_rank_microbatches"](m, v, group, p2p_communicator=comm)
    mb, ch = zip(*ns["get_schedule_table"](m, v, group), strict=True)
    fifo = dict.fromkeys(range(v), 0)

    def bwd(k: int) -> tuple[str, int, int]:
        c = v - 1 - ch[k]
        j = fifo[c]
        fifo[c] += 1
        return ("B", j, c)

    ops = [("F", mb[k], ch[k]) for k in range(w)]
    for k in range(rem):
        ops.append(("F", mb[k + w], ch[k + w]))
        ops.append(bwd(k))
    ops.extend(bwd(k) for k in range(rem, total))
    return ops


def main(path: str, commit: str, out: str) -> None:
    ns = load_functions(path)
    cases = []
    for pp, v, m, n in CASES:
        g = pp if n is None else n
        cases.append({"pp": pp, "vp": v, "m": m, "group": g,
                      "orders": [[list(o) for o in order(ns, pp, r, m, v, g)] for r in range(pp)]})
    with open(out, "w") as f:
        json.dump({"megatron_commit": commit, "generator": "tests/data/gen_megatron_pipeline_orders.py",
                   "cases": cases}, f)


if __name__ == "__main__":
    main(*sys.argv[1:4])
