"""The layout keeps its promises: which package may use which, no import cycles, and only the
playground imports Textual."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import specplay

PACKAGE = Path(specplay.__file__).parent

# Each package and what it may import (besides itself). Lazy imports inside functions count too:
# they are dependencies all the same. The engine is the bottom: it knows no configuration,
# backend, file or screen.
ALLOWED = {
    "errors": {"display"},
    "files": {"errors"},
    "engine": {"errors"},
    "catalog": {"errors", "files"},
    "drafters": {"catalog", "engine", "errors"},
    "config": {"catalog", "drafters", "engine", "errors"},
    "display": set(),
    "data": {"errors", "files"},
    "backends": {"config", "drafters", "engine", "errors", "files"},
    "store": {"root", "config", "display", "drafters", "engine", "errors", "files"},
    "runner": {"backends", "config", "engine", "errors", "store"},
    "router_training": {"root", "config", "drafters", "engine", "errors", "files", "store"},
    "fidelity": {"engine", "errors", "files", "store"},
    "review": {"display", "engine", "errors", "fidelity", "files", "store"},
    "bench": {"backends", "data", "engine", "errors", "files", "store"},
    "train": {"backends", "engine", "errors", "files", "store"},
    "ui": {"config", "data", "display", "drafters", "engine", "errors", "files", "review", "runner", "store"},
    "cli": {
        "root",
        "backends",
        "bench",
        "catalog",
        "config",
        "data",
        "display",
        "drafters",
        "engine",
        "errors",
        "fidelity",
        "files",
        "review",
        "router_training",
        "runner",
        "store",
        "train",
        "ui",
    },
    "__main__": {"cli"},
}


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = ["specplay", *path.relative_to(PACKAGE).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _imports(tree: ast.AST, modules: dict[str, Path], top_level_only: bool) -> set[str]:
    """The specplay modules a module imports (a `from x import y` counts y when y is a module)."""
    nodes = tree.body if top_level_only else list(ast.walk(tree))  # type: ignore[attr-defined]
    found: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name in modules}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            found |= {name for name in names if name in modules}
    return found


def _package(module: str) -> str:
    """specplay.engine.loop -> engine; specplay itself (its __version__) -> root."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "root"


def test_every_package_uses_only_the_layers_below_it() -> None:
    modules = _modules()
    broken = []
    for module, path in modules.items():
        package = _package(module)
        for imported in _imports(ast.parse(path.read_text()), modules, top_level_only=False):
            other = _package(imported)
            if other != package and other not in ALLOWED.get(package, set()):
                broken.append(f"{module} imports {imported}")
    assert not broken, "\n".join(broken)
    assert set(ALLOWED) >= {_package(m) for m in modules} - {"root"}, "a new package needs its row in ALLOWED"


def test_the_package_graph_has_no_cycle() -> None:
    order: list[str] = []
    seen: set[str] = set()

    def visit(package: str, path: tuple[str, ...]) -> None:
        assert package not in path, f"cycle: {' -> '.join((*path, package))}"
        if package in seen:
            return
        for below in ALLOWED.get(package, set()):
            visit(below, (*path, package))
        seen.add(package)
        order.append(package)

    for package in ALLOWED:
        visit(package, ())


def test_no_module_import_cycle() -> None:
    modules = _modules()
    graph = {m: _imports(ast.parse(p.read_text()), modules, top_level_only=True) for m, p in modules.items()}
    # A package's __init__ importing its own submodules is how packages export; the cycle that
    # breaks imports is between two modules that each need the other loaded first.
    state: dict[str, int] = defaultdict(int)  # 0 new, 1 on the stack, 2 done
    stack: list[str] = []

    def visit(module: str) -> None:
        state[module] = 1
        stack.append(module)
        for imported in graph[module]:
            if imported == module or imported.startswith(module + "."):
                continue  # a package importing its own submodules
            if state[imported] == 1:
                cycle = [*stack[stack.index(imported) :], imported]
                raise AssertionError(f"import cycle: {' -> '.join(cycle)}")
            if state[imported] == 0:
                visit(imported)
        stack.pop()
        state[module] = 2

    for module in graph:
        if state[module] == 0:
            visit(module)


TEXTUAL_FREE_UI = ("specplay.ui.controller", "specplay.ui.stats")
"""The playground's controller and its numbers: tested without a terminal, so without Textual."""


def test_headless_modules_never_import_textual() -> None:
    headless = sorted(m for m in _modules() if not m.startswith("specplay.ui") and m != "specplay.__main__")
    headless += TEXTUAL_FREE_UI
    code = (
        "import importlib, sys\n"
        f"for name in {headless!r}:\n"
        "    importlib.import_module(name)\n"
        "    if 'textual' in sys.modules:\n"
        "        sys.exit(f'{name} imports textual')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]


def test_the_engine_never_imports_a_model_library_http_or_a_terminal_library() -> None:
    engine = sorted(m for m in _modules() if m.startswith("specplay.engine"))
    forbidden = ("textual", "mlx", "mlx_lm", "httpx", "rich")
    code = (
        f"import importlib, sys\nfor name in {engine!r}: importlib.import_module(name)\n"
        f"bad = sorted({{m.split('.')[0] for m in sys.modules}} & {set(forbidden)!r})\n"
        "sys.exit(str(bad) if bad else 0)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]


def _positional_calls(min_args: int) -> list[tuple[str, int, str]]:
    """(module, line, callee) of each call in specplay/ passing `min_args` or more positional
    arguments, Rich table rows aside (a row is a list of cells)."""
    calls = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and len(node.args) >= min_args:
                callee = ast.unparse(node.func)
                if callee.endswith("add_row") or callee == "Table":
                    continue
                calls.append((path.relative_to(PACKAGE).as_posix(), node.lineno, callee))
    return calls


def test_records_and_options_go_by_keyword() -> None:
    """Six positional arguments carry a meaning only the callee's signature knows: none in the
    engine and backends, a handful at most elsewhere."""
    calls = _positional_calls(6)
    assert [c for c in calls if c[0].startswith(("engine/", "backends/"))] == []
    assert len(calls) <= 5, calls


def test_no_test_module_imports_another() -> None:
    """Shared test code lives in the support modules (helpers, session_events, distributions...),
    so a test module can be moved or deleted alone."""
    tests = Path(__file__).resolve().parents[1]
    importing = []
    for path in sorted(tests.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            module = (node.module or "") if isinstance(node, ast.ImportFrom) else ""
            if module.rpartition(".")[2].startswith("test_"):
                importing.append(f"{path.name} imports {node.module}")
    assert importing == []


def test_the_engines_and_the_controllers_tests_load_no_model_library() -> None:
    """They run on the scripted backend (tests/support/scripted.py): importing them, and the
    conftest, loads no MLX, so they stay quick and say nothing about a model library."""
    tests = Path(__file__).resolve().parents[1]
    modules = [f"tests.engine.{p.stem}" for p in sorted((tests / "engine").glob("test_*.py"))]
    modules += ["tests.conftest", "tests.ui.test_ui_controller"]
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('mlx', 'mlx_lm')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tests.parent, check=True)
    assert len(modules) > 5 and out.stdout.strip() == "[]"


def test_every_module_lives_in_a_package_that_says_what_it_is() -> None:
    """Beside the packages only the errors every layer raises and the entry point."""
    loose = sorted(path.name for path in PACKAGE.glob("*.py"))
    assert loose == ["__init__.py", "__main__.py", "errors.py"]


FILE_CALLS = {"open", "load_session", "open_writer", "SessionWriter", "read_text", "write_text", "read_bytes"}
"""What reads or writes a file: the playground's controller calls none of them."""


def test_the_playground_controller_is_small_and_touches_no_file() -> None:
    """It decides what a key or a control does; the runner saves sessions (runner/recording.py)
    and the screen reads the ones it opens (ui/opened.py)."""
    controller = PACKAGE / "ui" / "controller.py"
    assert len(controller.read_text(encoding="utf-8").splitlines()) < 400
    assert len((PACKAGE / "ui" / "app.py").read_text(encoding="utf-8").splitlines()) <= 300
    called = set()
    for node in ast.walk(ast.parse(controller.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call):
            func = node.func
            called.add(func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", ""))
    assert not called & FILE_CALLS
