"""The import graph of the engine, read from the source: the remote-job package, the providers
and the worker loop's two drivers form no cycle (every import between them counts, function-
level ones included, and no import-time cycle passes through them anywhere), and the
dashboard imports the engine, never the reverse. CI runs this with the unit tests."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("recovery", "dashboard")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def all_modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if "migrations" not in path.parts:
                found[module_name(path)] = path
    return found


def imports_of(name: str, path: Path, known: set[str], *, top_level: bool = False) -> set[str]:
    """The known modules `name` imports (a `from pkg import x` of a submodule counts as x);
    `top_level`: only the imports that run when the module is imported."""
    is_package = path.name == "__init__.py"
    found = set()
    tree = ast.parse(path.read_text(), str(path))
    for node in tree.body if top_level else ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                # `import a.b.c` imports a, a.b and a.b.c.
                found.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".") if is_package else name.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            submodules = {f"{base}.{alias.name}" for alias in node.names}
            if not submodules <= known:  # names defined by the module itself
                found.add(base)
            found.update(submodules)
    return {m for m in found if m in known and m != name}


def graph(*, top_level: bool = False) -> dict[str, set[str]]:
    modules = all_modules()
    known = set(modules)
    return {
        name: imports_of(name, path, known, top_level=top_level) for name, path in modules.items()
    }


def reach(edges: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for nxt in edges.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def in_core(name: str) -> bool:
    return (
        name in ("recovery.worker", "recovery.dispatch")
        or name.startswith(("recovery.remote.", "recovery.providers."))
        or name in ("recovery.remote", "recovery.providers")
    )


def test_the_graph_is_read():
    edges = graph()
    # The reader finds what it must (a broken reader would pass the checks below vacuously).
    assert "recovery.remote.submit" in edges["recovery.remote.steps"]
    assert "recovery.remote" in edges["recovery.worker"]
    assert "recovery.providers.remote_base" in edges["recovery.providers.messora"]
    assert "recovery.leases" in reach(edges, "recovery.worker")


def cycles_through_core(edges: dict[str, set[str]]) -> list[tuple[str, str]]:
    core = sorted(name for name in edges if in_core(name))
    assert len(core) > 10
    found = []
    for name in core:
        ahead = reach(edges, name)
        found += [(name, o) for o in sorted(ahead) if in_core(o) and name in reach(edges, o)]
    return found


def test_no_cycle_among_remote_providers_worker_and_dispatch():
    edges = graph()
    among = {n: {t for t in targets if in_core(t)} for n, targets in edges.items() if in_core(n)}
    assert cycles_through_core(among) == []


def test_no_import_time_cycle_passes_through_them():
    assert cycles_through_core(graph(top_level=True)) == []


def test_the_dashboard_imports_the_engine_and_never_the_reverse():
    edges = graph()
    assert any(m.startswith("recovery") for m in edges["dashboard.views"])
    # recovery.urls is the project's root URLconf (the settings live in recovery/ too): it
    # mounts the dashboard's URLs, as a project's urls.py does; the engine itself does not.
    wrong = sorted(
        (name, target)
        for name, targets in edges.items()
        if name.startswith("recovery") and name != "recovery.urls"
        for target in targets
        if target.split(".")[0] == "dashboard"
    )
    assert wrong == []


def test_liveness_and_outage_sit_below_the_worker():
    # Heartbeats and outage handling serve work, dispatch, deliver and qcluster alike: they
    # import nothing of the worker loop, even inside a function.
    edges = graph()
    assert "recovery.liveness" in reach(edges, "recovery.worker")
    for low in ("recovery.liveness", "recovery.outage"):
        assert "recovery.worker" not in reach(edges, low), low
