"""The package's shape: which module may import which, the size of the training story, settings resolved once."""

import ast
import sys
from dataclasses import FrozenInstanceError
from pathlib import Path

import pytest

import train_skill
from skill_rl.commands import config

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "skill_rl"


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        if "shipped_skills" in path.parts or "template" in path.parts:
            continue
        parts = path.relative_to(ROOT).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _type_only(tree: ast.Module) -> set[int]:
    """The ids of the import nodes under `if TYPE_CHECKING:`: they name types for the annotations and never run."""
    return {
        id(n)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
        for stmt in node.body
        for n in ast.walk(stmt)
    }


def _imports(name: str, path: Path, modules: dict) -> set[str]:
    """The package's modules that `name` imports, at module level or inside functions alike (not the type-only
    imports under `if TYPE_CHECKING:`, which never run)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    tree = ast.parse(path.read_text())
    skip = _type_only(tree)
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name in modules}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                )
            for a in node.names:
                target = f"{base}.{a.name}"
                out.add(target if target in modules else base)
    return {m for m in out if m in modules and m != name}


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def test_the_graph_reader_sees_imports_inside_functions_and_relative_ones(tmp_path):
    pkg = {"p": tmp_path / "__init__.py", "p.a": tmp_path / "a.py", "p.b": tmp_path / "b.py"}
    pkg["p.a"].write_text("def f():\n    from p import b\n")
    pkg["p.b"].write_text("from .a import f\n")
    assert _imports("p.a", pkg["p.a"], pkg) == {"p.b"} and _imports("p.b", pkg["p.b"], pkg) == {"p.a"}


def test_no_module_imports_one_that_imports_it_back(graph):
    def cycle_from(start):
        stack, seen = [(start, [start])], set()
        while stack:
            node, path = stack.pop()
            for nxt in graph[node]:
                if nxt == start:
                    return path + [start]
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, path + [nxt]))
        return None

    cycles = [c for c in map(cycle_from, graph) if c]
    assert not cycles, " -> ".join(cycles[0])


def _unit(module: str) -> str:
    """A module's place in the tree: its sub-package (skill_rl.training), or itself at the top (skill_rl.keys)."""
    return ".".join(module.split(".")[:2])


def test_no_sub_package_or_top_level_module_imports_one_that_imports_it_back(graph):
    """The tree read as layers: leaves (errors, text, files, ...), the loader and the settings, scoring, the CPU
    backend and training, then the commands, the export and mining; a package imports only below itself."""
    units: dict[str, set[str]] = {}
    for module, deps in graph.items():
        units.setdefault(_unit(module), set()).update(_unit(d) for d in deps if _unit(d) != _unit(module))

    def reaches(start, goal):
        stack, seen = [start], set()
        while stack:
            for nxt in units.get(stack.pop(), ()):
                if nxt == goal:
                    return True
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append(nxt)
        return False

    cycles = sorted(f"{a} -> {b} -> ... -> {a}" for a in units for b in units[a] if reaches(b, a))
    assert not cycles, cycles


def test_the_top_level_holds_at_most_twelve_modules():
    assert len(list(PACKAGE.glob("*.py"))) <= 12, sorted(p.name for p in PACKAGE.glob("*.py"))


def test_no_module_of_the_derived_checks_runs_past_500_lines():
    long = {
        p.name: n
        for p in (PACKAGE / "scoring" / "derived").glob("*.py")
        if (n := len(p.read_text().splitlines())) > 500
    }
    assert not long, long


def test_only_the_command_line_entry_imports_the_cli_module(graph):
    assert [m for m, deps in graph.items() if "skill_rl.commands.cli" in deps] == []


def test_scoring_and_the_skill_loader_import_nothing_of_training_or_the_cpu_backend(graph):
    low = [m for m in graph if m.startswith(("skill_rl.scoring", "skill_rl.skills"))]
    leaks = {
        m: sorted(d for d in graph[m] if d.startswith(("skill_rl.training", "skill_rl.cpu", "skill_rl.mining")))
        for m in low
    }
    assert not any(leaks.values()), leaks


def test_nothing_outside_the_skill_loader_takes_a_generic_helper_through_it():
    """What is imported from skill_rl.skills is what the loader defines (Skill, Task, load_skill, ...); the helpers
    it uses itself (skill_rl/text.py, skill_rl/files.py) are imported from their own modules."""
    loader = PACKAGE / "skills"
    defined = {p.stem for p in loader.glob("*.py")}
    for path in loader.glob("*.py"):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                defined.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                defined |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    outside = [
        Path(train_skill.__file__),
        *(p for d in (PACKAGE, ROOT / "tests", ROOT / "bench") for p in d.rglob("*.py") if loader not in p.parents),
    ]
    through = [
        f"{path.relative_to(ROOT)}:{node.lineno}: {a.name}"
        for path in outside
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("skill_rl.skills")
        for a in node.names
        if a.name not in defined
    ]
    assert not through, through


def test_train_tells_a_step_in_at_most_60_lines():
    tree = ast.parse(Path(train_skill.__file__).read_text())
    fn = next(n for n in tree.body if isinstance(n, ast.AsyncFunctionDef) and n.name == "train")
    lines = Path(train_skill.__file__).read_text().splitlines()[fn.lineno - 1 : fn.end_lineno]
    # comments narrate, on their own lines: the code is what is counted
    assert len([line for line in lines if not line.strip().startswith("#")]) <= 60


def test_no_flag_is_changed_after_parsing_outside_config_resolve():
    """The parsed flags are copied and resolved in one function; everything after reads its read-only result."""
    for path in [Path(train_skill.__file__), *(p for p in PACKAGE.rglob("*.py") if p.name != "config.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            targets = (
                node.targets
                if isinstance(node, ast.Assign)
                else [node.target]
                if isinstance(node, ast.AugAssign)
                else []
            )
            for t in targets:
                assert not (isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "args"), (
                    f"{path.relative_to(ROOT)}:{node.lineno}: assigns args.{t.attr}"
                )


def test_resolved_settings_are_read_only():
    args = train_skill.parse_args(["--skill", "git-commit", "--score", "x.jsonl", "--judge", "none"])
    from skill_rl.skills import find_skill, load_skill, skill_dirs

    run = config.resolve(args, load_skill(find_skill(skill_dirs(None), "git-commit")))
    # presets applied
    assert run.settings.judge == "none" and run.judge is None and run.settings.steps == 50
    with pytest.raises(FrozenInstanceError, match="cannot assign to field 'steps'"):
        run.settings.steps = 3
    # the parsed flags are left as parsed
    assert args.steps is None


def test_every_sub_package_is_in_the_wheel():
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    on_disk = {
        ".".join(p.parent.relative_to(ROOT).parts)
        for p in PACKAGE.rglob("__init__.py")
        if "shipped_skills" not in p.parts
    }
    assert on_disk <= listed, sorted(on_disk - listed)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-n0"]))
