"""The repository itself: nothing that .gitignore ignores (generated PTX, cubins, ledgers) is tracked."""

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_no_ignored_file_is_tracked():
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    tracked_but_ignored = subprocess.run(
        ["git", "ls-files", "--cached", "--ignored", "--exclude-standard"],
        cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    assert tracked_but_ignored == []


# ---- the shape of the package (issue: one owner per contract) ---------------------------------------------

import ast  # noqa: E402
import re  # noqa: E402

PACKAGE = ROOT / "judge"
MODULES = sorted(PACKAGE.rglob("*.py"))
# The first migration builds the whole initial schema; an applied migration is never edited.
LONG_ALLOWED = {("migrations.py", "m001_initial")}
SQL = re.compile(r"""["'](?:\s*)(select|insert|update|delete|create table|alter table)\s""", re.I)


def test_no_module_of_judge_is_over_450_lines():
    long = {str(p.relative_to(ROOT)): n for p in MODULES if (n := len(p.read_text().splitlines())) > 450}
    assert long == {}


def test_no_function_of_judge_is_over_60_lines():
    long = []
    for path in MODULES:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > 60:
                if (path.name, node.name) not in LONG_ALLOWED:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}")
    assert long == []


def test_sql_lives_in_the_ledger_and_the_migrations_only():
    owners = {PACKAGE / "migrations.py", *(PACKAGE / "ledger").glob("*.py")}
    found = [f"{p.relative_to(ROOT)}:{n}" for p in MODULES if p not in owners
             for n, line in enumerate(p.read_text().splitlines(), start=1) if SQL.search(line)]
    assert found == []


def test_every_import_inside_judge_resolves():
    """Imports inside functions run late: a module moved into a package must not leave one pointing nowhere."""
    import importlib
    import importlib.util

    missing = []
    for path in MODULES:
        package = path.relative_to(ROOT).with_suffix("").parts[:-1]  # judge/ledger/x.py and its __init__: judge.ledger
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.ImportFrom) and node.level):
                continue
            base = list(package[: len(package) - (node.level - 1)])
            name = ".".join(base + ([node.module] if node.module else []))
            module = importlib.import_module(name)
            for alias in node.names:
                if not hasattr(module, alias.name) and importlib.util.find_spec(f"{name}.{alias.name}") is None:
                    missing.append(f"{path.relative_to(ROOT)}:{node.lineno} {name}.{alias.name}")
    assert missing == []
