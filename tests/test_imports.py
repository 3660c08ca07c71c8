"""The harness and the runners import without cycles: every module on its own in a fresh state, and no import
deferred into a function body hides a cycle (a module that, imported at the top, would import this one back)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("harness", "runners")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py"))}


def imported(node: ast.AST, here: str) -> list[str]:
    """The project modules an import statement names (a `from package import module` names the module)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name in MODULES]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = node.module or ""
    if node.level:  # relative: from the package of `here`
        package = here.split(".")[: -node.level] if not MODULES[here].name == "__init__.py" else here.split(".")
        base = ".".join([*package, *filter(None, [node.module])])
    names = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in MODULES]
    return names or ([base] if base in MODULES else [])


def imports(name: str) -> tuple[set[str], set[str]]:
    """(modules imported at the top of the module, modules imported inside its functions)."""
    tree = ast.parse(MODULES[name].read_text())
    top = {m for node in tree.body for m in imported(node, name)}
    top |= {m for node in tree.body if isinstance(node, (ast.If, ast.Try)) for n in ast.walk(node) for m in imported(n, name)}
    deferred = {m for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                for n in ast.walk(node) for m in imported(n, name)} - top  # fmt: skip
    return top, deferred


def reaches(start: str, goal: str, graph: dict[str, set[str]]) -> bool:
    seen, todo = set(), [start]
    while todo:
        m = todo.pop()
        if m == goal:
            return True
        if m not in seen:
            seen.add(m)
            # importing a.b.c runs a and a.b first
            todo += [*graph.get(m, ()), *(".".join(m.split(".")[:i]) for i in range(1, m.count(".") + 1))]
    return False


def test_no_deferred_import_hides_a_cycle():
    graph = {name: imports(name)[0] for name in MODULES}
    hidden = [(name, target) for name in MODULES for target in imports(name)[1] if reaches(target, name, graph)]
    assert not hidden, f"imports deferred into a function to break a cycle: {hidden}"


def test_the_bench_and_the_duets_import_each_other_at_the_top():
    """The bench runs peer duets and the duets build their children from a run's settings: both at the top."""
    assert "harness.duet" in imports("harness.bench")[0] and "harness.settings" in imports("harness.duet")[0]
    assert not imports("harness.bench")[1] & {"harness.duet"} and "harness.bench" not in imports("harness.duet")[0]


CHECK_EACH = r"""
import importlib, sys
failed = []
for name in sys.argv[1:]:
    for loaded in [m for m in sys.modules if m.split(".")[0] in ("harness", "runners")]:
        del sys.modules[loaded]  # a fresh start for the project's modules; the libraries stay loaded
    try:
        importlib.import_module(name)
    except ImportError as e:
        if getattr(e, "name", None) and e.name.split(".")[0] in ("harness", "runners"):
            failed.append(f"{name}: {e}")
print("\n".join(failed) or "all imported")
"""


def test_every_module_imports_on_its_own():
    """Each module first, in a fresh state of the project's modules: a cycle fails whichever of its modules comes
    first. A missing optional library (vLLM, TensorRT on a CPU machine) is not what this checks."""
    done = subprocess.run([sys.executable, "-c", CHECK_EACH, *MODULES], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "all imported", done.stdout
