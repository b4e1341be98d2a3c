"""The package's layers run one way: a module imports only modules below it, the core never
imports the tools, and no module reaches into another's private names. And every module stays
short enough to read in one sitting: ``MAX_LINES`` at most, split along its seams past that."""

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "minidflash"

MAX_LINES = 500
# Each core module and the core modules it may import (directly or lazily).
LAYERS = ["config", "mask", "hub", "verify_cost", "settings", "kernel", "attention", "target", "drafter",
          "ar_drafter", "batch", "decoding", "tree", "verifier", "train_data", "train_start",
          "trainer"]


def imports_of(path: Path, pkg: str | None = None) -> list[tuple[str, list[str]]]:
    """(module imported, names taken) for every relative or minidflash import in a file of the
    package ``pkg`` (default: the folder the file is in)."""
    pkg = pkg or path.parent.relative_to(PKG.parent).as_posix().replace("/", ".")
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
                if node.module is None or mod in ("minidflash", "minidflash.tools") or mod.startswith("minidflash.tools.") and mod.count(".") == 2:
                    out += [(f"{mod}.{n}", []) for n in names]
                else:
                    out.append((mod, names))
        elif isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names if a.name.startswith("minidflash")]
    return out


def test_core_imports_only_lower_layers():
    for rank, name in enumerate(LAYERS):
        for mod, _ in imports_of(PKG / f"{name}.py"):
            dep = mod.removeprefix("minidflash.")
            assert dep in LAYERS[:rank], f"minidflash/{name}.py imports {mod}: not a layer below it"


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
    """The check itself: an upward import added to mask.py is reported, the real one is clean."""
    planted = tmp_path / "mask.py"
    planted.write_text((PKG / "mask.py").read_text() + "\nfrom .drafter import DFlashDrafter\n")
    assert "minidflash.drafter" not in [m for m, _ in imports_of(PKG / "mask.py")]
    assert ("minidflash.drafter", ["DFlashDrafter"]) in imports_of(planted, pkg="minidflash")


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
