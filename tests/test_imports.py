"""Underscored names stay inside their subpackage.

A name that starts with ``_`` is private to its subpackage (``gradax.optimizers``, ``gradax.transforms``, ...; the
core modules ``gradax/_*.py`` count as one package). A helper that other subpackages need gets a name without the
underscore in a private module (``gradax._state.zeros_state_like``), so that its users are visible and its interface
is kept. Importing a private *module* (``from .. import _kernels``, ``from .._base import chain``) is fine.
"""

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "gradax"


def _package(root: Path, parts: tuple[str, ...]) -> str:
    """The subpackage of the module ``gradax.<parts>`` ("" for the core modules ``gradax/_x.py``)."""
    if not parts:
        return ""
    return parts[0] if len(parts) > 1 or (root / parts[0]).is_dir() else ""


def _is_module(root: Path, parts: list[str]) -> bool:
    path = root.joinpath(*parts)
    return path.is_dir() or path.with_suffix(".py").is_file()


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def cross_package_private_imports(root: Path) -> list[str]:
    """``"<file>:<line>: <module>.<name>"`` for every underscored name a module of ``root`` takes from another
    subpackage (by ``from ... import _name`` or as ``module._name`` of an imported module)."""
    found = []
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        is_init = parts[-1] == "__init__"
        here = parts[:-1] if is_init else parts
        mine = _package(root, here)
        modules = {}  # local name -> target parts, for imported modules of other subpackages
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = list(here if is_init else here[:-1])
                    base = base[: len(base) - (node.level - 1)]
                    rest = node.module
                elif node.module and node.module.split(".")[0] == "gradax":
                    base, rest = [], node.module.partition(".")[2]
                else:
                    continue
                target = base + (rest.split(".") if rest else [])
                for alias in node.names:
                    full = [*target, alias.name]
                    if _is_module(root, full):
                        if _package(root, tuple(full)) != mine:
                            modules[alias.asname or alias.name] = full
                    elif _private(alias.name) and _package(root, tuple(target)) != mine:
                        found.append(f"{path.relative_to(root)}:{node.lineno}: {'.'.join(target)}.{alias.name}")
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    names = alias.name.split(".")
                    if names[0] == "gradax" and alias.asname and _package(root, tuple(names[1:])) != mine:
                        modules[alias.asname] = names[1:]
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and _private(node.attr):
                target = modules.get(node.value.id)
                if target is not None and not _is_module(root, [*target, node.attr]):
                    found.append(f"{path.relative_to(root)}:{node.lineno}: {'.'.join(target)}.{node.attr}")
    return found


def test_no_underscored_name_crosses_a_subpackage():
    found = cross_package_private_imports(SRC)
    assert not found, (
        "underscored names imported from another subpackage (give the helper a name without the underscore in a "
        "private module, or move it):\n" + "\n".join(found)
    )


def test_the_check_finds_each_kind_of_crossing(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "__init__.py").write_text("")
    (tmp_path / "_core.py").write_text("def _hidden(): ...\ndef shared(): ...\n")
    (tmp_path / "a" / "__init__.py").write_text("")
    (tmp_path / "a" / "_x.py").write_text("def _own(): ...\n")
    (tmp_path / "a" / "_y.py").write_text("from ._x import _own\nfrom .._core import shared\n")
    (tmp_path / "b" / "__init__.py").write_text("")
    (tmp_path / "b" / "_z.py").write_text(
        "from .._core import _hidden\n"
        "from ..a import _x\n"
        "import gradax.a._x as ax\n"
        "from gradax.a._x import _own\n"
        "_x._own()\n"
        "ax._own()\n"
    )
    found = cross_package_private_imports(tmp_path)
    assert found == [
        "b/_z.py:1: _core._hidden",
        "b/_z.py:4: a._x._own",
        "b/_z.py:5: a._x._own",
        "b/_z.py:6: a._x._own",
    ]
