"""The package's import structure: every module imports, no import cycle, lower layers never import higher ones.

The layers follow the README's data flow (profiles + model + workload → cost →
policy → sim → report/export), lowest first. Every import statement counts,
including those inside functions: a lazy import is still a dependency.
"""

from __future__ import annotations

import ast
import functools
import importlib
from pathlib import Path

import numpy as np
import pytest

PKG = Path(__file__).resolve().parent.parent / "dcpsim"

# top-level subpackage/module of dcpsim -> layer (lowest first); same layer may import each other
LAYERS: dict[str, int] = {
    "errors": 0, "units": 0, "serialize": 0, "schema": 0, "choices": 0, "outdir": 0, "limits": 0, "registry": 0, "failure_rates": 0, "padding": 0,
    "hardware": 1, "model": 1, "workload": 1,
    "cost": 2, "pipeline": 2,
    "policies": 3,
    "sim": 4,
    "run": 5,
    "report": 6, "export": 6, "reproduction": 6, "planning": 6, "profiling": 6, "published": 6,
    "commands": 7, "cli": 7, "__main__": 7,
}


def _modules() -> dict[str, Path]:
    out = {}
    for p in PKG.rglob("*.py"):
        parts = list(p.relative_to(PKG.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


MODULES = _modules()


def _resolve(name: str) -> str | None:
    """The dcpsim module an imported name lives in (``dcpsim.policies.plan.Layout`` -> ``dcpsim.policies.plan``)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(mod: str) -> set[str]:
    tree = ast.parse(MODULES[mod].read_text(encoding="utf-8"))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        for n in names:
            r = _resolve(n) if n.split(".")[0] == "dcpsim" else None
            if r and r != mod:
                out.add(r)
    return out


@functools.cache
def _graph() -> dict[str, set[str]]:
    """Every module's dcpsim imports (parsed when a test first needs them, not at collection: each xdist
    worker collects this file)."""
    return {m: _imports(m) for m in MODULES}


def _layer(mod: str) -> int:
    parts = mod.split(".")
    if len(parts) == 1:  # the package root re-exports the public API: above everything but the CLI
        return 7
    # a module not placed yet counts as the lowest layer: it may import only errors-level modules
    # until it is given its place here (and in the README)
    return LAYERS.get(parts[1], 0)


@pytest.mark.parametrize("mod", sorted(MODULES))
def test_every_module_imports(mod):
    importlib.import_module(mod)


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{m} (layer {_layer(m)}{'' if m.split('.')[1] in LAYERS else ', not placed in LAYERS'}) imports {d} "
                  f"(layer {_layer(d)})"
                  for m, deps in graph.items() for d in deps if m != "dcpsim" and _layer(d) > _layer(m))


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def test_lower_layers_never_import_higher_ones():
    bad = upward_imports(_graph())
    assert not bad, "\n".join(bad)


def test_no_import_cycles():
    assert not import_cycles(_graph()), f"import cycles: {import_cycles(_graph())}"


def test_the_checks_can_fail():
    """A planted cycle and a planted upward edge on top of the real graph are found."""
    assert "dcpsim.policies.plan" in _graph()["dcpsim.policies.base"]  # the walk reads real edges
    planted = {m: set(d) for m, d in _graph().items()}
    planted["dcpsim.policies.plan"].add("dcpsim.policies.base")
    assert any({"dcpsim.policies.base", "dcpsim.policies.plan"} <= set(c) for c in import_cycles(planted))
    planted["dcpsim.run.sweep"].add("dcpsim.report.plots")
    assert any(b.startswith("dcpsim.run.sweep ") for b in upward_imports(planted))


def test_plan_evaluates_its_lower_bound_only_when_read():
    """Policy.plan attaches the bound as an evaluator; reading ``lower_bound_s`` runs it once."""
    from dcpsim.cost import CostModel
    from dcpsim.policies import Layout, get_policy, lower_bound_s

    lay = Layout(dp=2, cp=2, max_tokens_per_rank=4096)
    cost = CostModel.build("h100-sxm", "llama-13b", dp_cp=4)
    lengths = np.array([3000, 100, 1200, 700, 9000])
    plan = get_policy("dynamic").plan(lengths, lay, cost)
    assert plan.bound_evaluator is not None and plan.__dict__.get("_lower_bound_s") is None
    assert plan.lower_bound_s == pytest.approx(lower_bound_s(lengths, lay, cost))
    assert plan.bound_evaluator is None  # evaluated once, references dropped


def test_to_jsonable_is_strict_json():
    import json
    import math

    from dcpsim.serialize import to_jsonable

    obj = {1: np.float64("nan"), "a": (np.int64(3), np.array([1.5, np.inf])), "p": Path("/x"), "f": math.inf}
    out = to_jsonable(obj)
    assert out == {"1": None, "a": [3, [1.5, None]], "p": "/x", "f": None}
    json.dumps(out, allow_nan=False)
    kept = to_jsonable(obj, nonfinite_as_null=False)
    assert math.isnan(kept["1"]) and kept["a"][1][1] == math.inf


def test_toml_value_round_trips():
    import tomllib

    from dcpsim.serialize import toml_value

    v = {"a": True, "b": np.int64(3), "c": 0.1, "d": 'x "q" \\ é\n', "e": [1, 2.5, "s"], "f": {"g": 1}}
    text = "\n".join(f"{k} = {toml_value(x)}" for k, x in v.items())
    back = tomllib.loads(text)
    assert back == {"a": True, "b": 3, "c": 0.1, "d": 'x "q" \\ é\n', "e": [1, 2.5, "s"], "f": {"g": 1}}


def test_the_config_schema_loads_no_policy_workload_or_simulator():
    """Importing the run configuration and validating one against its schema (names of a policy, a network and
    an engine; a workload table) loads neither simpy nor dcpsim.sim, .policies, .workload or .cost: the schema
    checks registered names only (dcpsim.choices); dcpsim.run.load checks what the named code accepts."""
    import os
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from dcpsim.run.config import RunConfig, parse_config\n"
        "from dcpsim.run import RunConfig as R2\n"
        "cfg = RunConfig().with_updates({'policy.name': 'dynamic-solver', 'sim.network': 'shared', 'sim.engine': 'events',"
        " 'workload.name': {'type': 'lognormal', 'mean': 4000.0, 'sigma': 1.0}})\n"
        "parse_config({'workload': {'name': 'fixed', 'seq_len': 4096, 'gbs': 64}, 'parallel': {'cp': 2}}).max_tokens_per_rank\n"
        "bad = [m for m in sys.modules if m == 'simpy' or m.split('.')[:2] in (['dcpsim', 'sim'], ['dcpsim', 'policies'],"
        " ['dcpsim', 'workload'], ['dcpsim', 'cost'])]\n"
        "print(sorted(bad))\n"
    )
    root = Path(__file__).resolve().parent.parent
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root, check=True,
                         env={**os.environ, "PYTHONPATH": str(root)})
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
