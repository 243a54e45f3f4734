"""House rules of the core (../shared/DESIGN.md, STYLE.md rule 8): no module under workbench/ over 600 lines and no
function over 80 lines unless its docstring says why, on a line that starts with ``Long because:``.

Lengths are physical lines: a module's whole file, a function from its ``def`` line to its last line (decorators
left out; a nested function counts in its parent and on its own)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORE = ROOT / "workbench"
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80
REASON_MARKER = "Long because:"


def module_lines(source: str) -> int:
    return len(source.splitlines())


def long_functions(source: str, limit: int = MAX_FUNCTION_LINES) -> list[tuple[str, int, int]]:
    """(qualified name, line of its ``def``, length in lines) of each function of ``source`` longer than
    ``limit`` lines whose docstring has no line starting with ``REASON_MARKER``."""
    out: list[tuple[str, int, int]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (child.end_lineno or child.lineno) - child.lineno + 1
                doc = ast.get_docstring(child) or ""
                reason = any(line.strip().startswith(REASON_MARKER) for line in doc.splitlines())
                if length > limit and not reason:
                    out.append((f"{prefix}{child.name}", child.lineno, length))
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return out


def _core_modules() -> list[tuple[str, str]]:
    return [(p.relative_to(ROOT).as_posix(), p.read_text()) for p in sorted(CORE.rglob("*.py"))]


def test_no_core_module_over_600_lines() -> None:
    over = [
        f"{path}: {module_lines(src)} lines"
        for path, src in _core_modules()
        if module_lines(src) > MAX_MODULE_LINES
    ]
    assert not over, f"split these by what they compute (at most {MAX_MODULE_LINES} lines):\n" + "\n".join(
        over
    )


def test_no_core_function_over_80_lines_without_a_reason() -> None:
    over = [
        f"{path}:{line} {name}: {length} lines"
        for path, src in _core_modules()
        for name, line, length in long_functions(src)
    ]
    assert not over, (
        f"extract named steps (at most {MAX_FUNCTION_LINES} lines), or say why in the docstring on a line "
        f"starting with {REASON_MARKER!r}:\n" + "\n".join(over)
    )


def _function(name: str, body_lines: int, doc: str = "A function.") -> str:
    """Source of a function of exactly 2 + body_lines lines: its def, its one-line docstring, the body."""
    body = "".join(f"    x{i} = {i}\n" for i in range(body_lines))
    return f'def {name}():\n    """{doc}"""\n{body}'


def test_the_function_check_counts_lines_and_reads_the_reason() -> None:
    assert long_functions(_function("fits", 78)) == []  # 80 lines
    assert long_functions(_function("too_long", 79)) == [("too_long", 1, 81)]
    assert long_functions(_function("said_why", 79, "Long because: one table of 79 rows.")) == []
    assert long_functions(_function("said_elsewhere", 79, "It is not Long because: mid-line.")) == [
        ("said_elsewhere", 1, 81)
    ]
    nested = "class Engine:\n" + "".join("    " + line + "\n" for line in _function("step", 79).splitlines())
    assert long_functions(nested) == [("Engine.step", 2, 81)]
    assert module_lines("x = 1\n" * (MAX_MODULE_LINES + 1)) == MAX_MODULE_LINES + 1
