"""The package's layers run one way: a module imports only modules below it, the core never
imports the tools, and no module reaches into another's private names."""

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "minidflash"

# Each core module and the core modules it may import (directly or lazily).
LAYERS = ["config", "mask", "hub", "kernel", "attention", "target", "drafter", "ar_drafter", "batch",
          "verifier", "train_data", "train_start", "trainer"]


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
                if node.module is None or mod in ("minidflash", "minidflash.tools"):
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
    tools = sorted((PKG / "tools").glob("*.py"))
    assert len(tools) >= 8
    for path in tools:
        for mod, _ in imports_of(path):
            assert mod.startswith("minidflash."), mod


def test_no_private_names_across_modules():
    for path in [*PKG.glob("*.py"), *(PKG / "tools").glob("*.py")]:
        for mod, names in imports_of(path):
            private = [n for n in names if n.startswith("_")]
            assert not private, f"{path.name} imports private {private} from {mod}"


def test_the_check_sees_a_planted_upward_import(tmp_path):
    """The check itself: an upward import added to mask.py is reported, the real one is clean."""
    planted = tmp_path / "mask.py"
    planted.write_text((PKG / "mask.py").read_text() + "\nfrom .drafter import DFlashDrafter\n")
    assert "minidflash.drafter" not in [m for m, _ in imports_of(PKG / "mask.py")]
    assert ("minidflash.drafter", ["DFlashDrafter"]) in imports_of(planted, pkg="minidflash")
