"""The package's layers run one way: a module imports only modules below it, the core never
imports the tools, and no module reaches into another's private names. And every module stays
short enough to read in one sitting: ``MAX_LINES`` at most, split along its seams past that.

The tools sit in folders that import one way too, bottom to top (``FOLDERS``): llama.cpp's
binaries and the engine wrapper, the one leaf of shared helpers, the decoding flags, making data,
training, measuring. Every import counts, the lazy ones inside functions as well: no cycle
between two modules, none between two folders, and no folder imports one above it."""

import ast
import shutil
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parent.parent / "minidflash"

MAX_LINES = 500
# Each core module and the core modules it may import (directly or lazily).
LAYERS = ["core.paper", "core.mask", "core.kernel", "core.attention", "core.drafter", "core.trainer", "core.verifier", "paths",
          "files", "hub", "weights", "exact", "row_product", "lean", "lean_drafter", "batch", "verify_cost", "prices", "decoding_text", "decoding_config", "target", "attention",
          "checkpoints", "ar_drafter", "prepare", "decoding", "tree", "verifier", "train_config", "train_data",
          "train_start", "trainer"]
# The folders, bottom to top: each may import the core and the folders before it, never after.
FOLDERS = ["core", "tools/engines", "tools/common", "tools/flags", "tools/make_data",
           "tools/train", "tools/measure"]


def is_module(name: str, root: Path) -> bool:
    """Whether the dotted ``name`` (minidflash....) is a module or package under ``root`` (the
    folder that holds the package)."""
    path = root.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def imports_of(path: Path, pkg: str | None = None, root: Path | None = None) -> list[tuple[str, list[str]]]:
    """(module imported, names taken) for every relative or minidflash import in a file of the
    package ``pkg`` (default: the folder the file is in), the lazy ones inside functions too. A
    name that is itself a module (``from ..make_data import corpus``) is that module; ``root``
    (default: this repository) is where such names are looked up."""
    root = root or PKG.parent
    pkg = pkg or path.parent.relative_to(root).as_posix().replace("/", ".")
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if mod.startswith("minidflash"):
                names = [a.name for a in node.names]
                modules = [n for n in names if is_module(f"{mod}.{n}", root)]
                out += [(f"{mod}.{n}", []) for n in modules]
                if len(modules) < len(names):
                    out.append((mod, [n for n in names if n not in modules]))
        elif isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names if a.name.startswith("minidflash")]
    return out


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(pkg_dir: Path) -> dict[str, set[str]]:
    """module -> the package's modules it imports, for every .py file under ``pkg_dir`` (the
    ``minidflash`` folder: core and tools)."""
    root = pkg_dir.parent
    graph = {}
    for path in sorted(pkg_dir.rglob("*.py")):
        name = module_name(path, root)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        graph[name] = {m for m, _ in imports_of(path, package, root) if m != name}
    return graph


def folder_of(module: str) -> str | None:
    """The folder of FOLDERS a module belongs to (None: the empty package markers)."""
    parts = module.split(".")
    if module in ("minidflash", "minidflash.tools"):
        return None
    if parts[1] != "tools":
        return "core"
    name = parts[2]
    return f"tools/{name}" if f"tools/{name}" in FOLDERS else f"tools/{name} (not a folder of FOLDERS)"


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The cycles of a directed graph, one per strongly connected component of two nodes or more
    (or a node importing itself): each as a path a -> b -> ... -> a along its edges."""
    found, seen = [], set()
    for start in sorted(graph):
        if start in seen:
            continue
        # the nodes reachable from start that reach back to it: start's component
        stack, path, on_path = [(start, iter(sorted(graph.get(start, ()))))], [start], {start}
        while stack:
            node, edges = stack[-1]
            nxt = next(edges, None)
            if nxt is None:
                stack.pop()
                on_path.discard(path.pop())
            elif nxt in on_path:
                cycle = path[path.index(nxt):] + [nxt]
                if not any(set(cycle) <= set(c) for c in found):
                    found.append(cycle)
            elif nxt in graph and nxt not in seen:
                seen.add(nxt)
                stack.append((nxt, iter(sorted(graph[nxt]))))
                path.append(nxt)
                on_path.add(nxt)
        seen.add(start)
    return found


def folder_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """folder -> the other folders its modules import."""
    out = {}
    for mod, deps in graph.items():
        a = folder_of(mod)
        if a is not None:
            out.setdefault(a, set()).update(b for b in map(folder_of, deps) if b not in (None, a))
    return out


def layering_errors(pkg_dir: Path) -> list[str]:
    """Every module cycle, every folder cycle, and every import of a folder above the importer
    (the core importing the tools included), in words; empty for a clean package."""
    graph = import_graph(pkg_dir)
    errors = [f"module cycle: {' -> '.join(c)}" for c in cycles(graph)]
    folders = folder_graph(graph)
    errors += [f"folder cycle: {' -> '.join(c)}" for c in cycles(folders)]
    for folder in folders:
        if folder not in FOLDERS:
            errors.append(f"{folder}: every tools module lives in one of {', '.join(FOLDERS[1:])}")
    for mod, deps in sorted(graph.items()):
        a = folder_of(mod)
        for dep in sorted(deps):
            b = folder_of(dep)
            if a in FOLDERS and b in FOLDERS and FOLDERS.index(b) > FOLDERS.index(a):
                errors.append(f"{mod} ({a}) imports {dep} ({b}): a folder above it")
    return errors


def test_core_imports_only_lower_layers():
    for rank, name in enumerate(LAYERS):
        for mod, _ in imports_of(PKG / f"{name.replace('.', '/')}.py"):
            dep = mod.removeprefix("minidflash.")
            assert dep in LAYERS[:rank], (f"minidflash/{name.replace('.', '/')}.py imports {mod}: "
                                          f"not a layer below it")


def test_tools_import_the_core_never_the_reverse():
    tools = sorted((PKG / "tools").rglob("*.py"))
    assert len(tools) >= 8
    for path in tools:
        for mod, _ in imports_of(path):
            assert mod.startswith("minidflash."), mod


def test_no_private_names_across_modules():
    for path in [*PKG.glob("*.py"), *(PKG / "tools").rglob("*.py")]:
        for mod, names in imports_of(path):
            private = [n for n in names if n.startswith("_")]
            assert not private, f"{path.name} imports private {private} from {mod}"


def test_the_check_sees_a_planted_upward_import(tmp_path):
    """The check itself: an upward import added to core/mask.py is reported, the real one is clean."""
    planted = tmp_path / "mask.py"
    planted.write_text((PKG / "core" / "mask.py").read_text() + "\nfrom .drafter import DFlashDrafter\n")
    assert "minidflash.core.drafter" not in [m for m, _ in imports_of(PKG / "core" / "mask.py")]
    assert ("minidflash.core.drafter", ["DFlashDrafter"]) in imports_of(planted, pkg="minidflash.core")


def test_no_import_cycle_and_the_folders_run_one_way():
    """Every module of the package, core and tools, its lazy imports too: no cycle of modules,
    none of folders, no folder importing one above it (the core importing no tool)."""
    graph = import_graph(PKG)
    assert {"minidflash.tools.common", "minidflash.tools.measure.bench",
            "minidflash.tools.train.train_drafter"} <= set(graph)
    assert "minidflash.tools.make_data.corpus" in graph["minidflash.tools.train.tiny_target"]
    errors = layering_errors(PKG)
    assert not errors, "\n".join(errors)


def test_common_is_a_leaf_of_the_tools():
    """tools/common.py imports the core and nothing else (not even the engines)."""
    deps = import_graph(PKG)["minidflash.tools.common"]
    assert deps and all(folder_of(d) == "core" for d in deps), sorted(deps)


def test_every_command_is_a_module_with_a_main():
    from minidflash.__main__ import COMMANDS

    for command, (module, _) in COMMANDS.items():
        name = f"minidflash.tools.{module}"
        assert is_module(name, PKG.parent), f"{command}: no module {name}"
        tree = ast.parse((PKG.parent / (name.replace(".", "/") + ".py")).read_text())
        assert any(isinstance(n, ast.FunctionDef) and n.name == "main" for n in tree.body), command


def planted_copy(tmp_path: Path, file: str, line: str) -> Path:
    """A copy of the package with ``line`` added at the end of ``file`` (a function's body when
    it is indented: a lazy import)."""
    pkg = tmp_path / "minidflash"
    shutil.copytree(PKG, pkg, ignore=shutil.ignore_patterns("__pycache__"))
    path = pkg / file
    path.write_text(path.read_text() + "\n" + line + "\n")
    return pkg


@pytest.mark.parametrize("file, line, expected", [
    # two modules of make_data importing each other: overlap reads suites, suites now overlap
    ("tools/make_data/suites.py", "from .overlap import N",
     ["module cycle: minidflash.tools.make_data.suites -> minidflash.tools.make_data.overlap -> "
      "minidflash.tools.make_data.suites"]),
    # the leaf reaching up into make_data, lazily, inside a function
    ("tools/common.py", "def planted():\n    from .make_data import corpus",
     ["folder cycle: tools/common -> tools/make_data -> tools/common",
      "minidflash.tools.common (tools/common) imports minidflash.tools.make_data.corpus "
      "(tools/make_data): a folder above it"]),
    # the engines reading a benchmark (what engines/llama_cpp.py did)
    ("tools/engines/llama_cpp.py", "from ..measure.bench import step_times",
     ["minidflash.tools.engines.llama_cpp (tools/engines) imports minidflash.tools.measure.bench "
      "(tools/measure): a folder above it"]),
    # the core importing a tool
    ("verify_cost.py", "from .tools.common import read_jsonl",
     ["minidflash.verify_cost (core) imports minidflash.tools.common (tools/common): a folder "
      "above it"]),
])
def test_the_check_sees_a_planted_cycle(tmp_path, file, line, expected):
    """The check itself: each planted import is reported (as a cycle, an upward import or both),
    and the copy without it is clean."""
    clean = tmp_path / "clean"
    shutil.copytree(PKG, clean / "minidflash", ignore=shutil.ignore_patterns("__pycache__"))
    assert layering_errors(clean / "minidflash") == []
    errors = layering_errors(planted_copy(tmp_path / "planted", file, line))
    for e in expected:
        assert e in errors, "\n".join(errors)


def test_the_cycle_finder_on_a_small_graph():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"a"}}) == [["a", "a"]]
    assert len(cycles({"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"c"}})) == 2


def modules_over(root: Path, limit: int = MAX_LINES) -> list[str]:
    """"path: N lines" for every .py file under ``root`` (core and tools) longer than limit."""
    over = []
    for path in sorted(root.rglob("*.py")):
        n = len(path.read_text().splitlines())
        if n > limit:
            over.append(f"{path.relative_to(root.parent).as_posix()}: {n} lines")
    return over


def test_every_module_fits_the_line_budget():
    over = modules_over(PKG)
    assert not over, f"over {MAX_LINES} lines (split along the seams it has): {', '.join(over)}"


def test_the_line_budget_sees_a_planted_long_module(tmp_path):
    """The check itself: a tools module of 501 lines is named with its count, 500 pass."""
    pkg = tmp_path / "minidflash"
    (pkg / "tools").mkdir(parents=True)
    (pkg / "tools" / "long.py").write_text("x = 1\n" * (MAX_LINES + 1))
    (pkg / "short.py").write_text("x = 1\n" * MAX_LINES)
    assert modules_over(pkg) == ["minidflash/tools/long.py: 501 lines"]
