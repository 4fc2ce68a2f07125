"""The layout is a checked contract (docs/architecture.md): imports point down the floors, no two files
import each other (directly or round a longer circle), the analysis, the render and the dashboard never
reach the engine, the engine takes from popvision_py only the format, the errors and the version (its
planner's rules are its own), no source file is over 600 lines, no class name is defined in two modules
(but PopTorch's and PopDist's API mirrors, listed), and tests, benchmarks, examples and scripts take from
the CLI only the program and its commands.

The imports are read with ``ast`` from every module of the five packages, including imports inside
functions and a package's ``__init__.py``, so a lazy import counts like any other.
"""

import ast
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("popvision_py", "engine", "poptorch", "popdist", "dashboards")
MAX_LINES = 600

# From the bottom. A module belongs to the floor of the longest prefix listed here; ``popvision_py``
# itself (the facade, its __init__.py) is no prefix, so a new package under it must be placed here.
FLOORS = (
    ("popvision_py.errors", "popvision_py.version", "popvision_py.workers", "popvision_py.format"),
    ("engine", "popvision_py.importer"),
    ("popvision_py.analysis", "popvision_py.render", "popvision_py.export_trace", "popvision_py.sql", "popvision_py"),
    ("poptorch", "popdist", "popvision_py.tune", "dashboards", "popvision_py.scripts", "popvision_py.run_figures",
     "popvision_py.emulation"),
    ("popvision_py.cli",),
)


def floor_of(module):
    """The floor (0 = bottom) that owns ``module``, by the longest listed prefix."""
    best, best_len = None, -1
    for level, prefixes in enumerate(FLOORS):
        for prefix in prefixes:
            within = module == prefix or (module.startswith(prefix + ".") and prefix != "popvision_py")
            if within and len(prefix) > best_len:
                best, best_len = level, len(prefix)
    if best is None:
        raise AssertionError(f"{module} sits on no floor: add it to FLOORS and docs/architecture.md")
    return best


def modules_under(root, packages=PACKAGES):
    """{module name: file} for every .py file of ``packages`` under ``root``."""
    found = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def _absolute(module, path, node):
    """The absolute module named by an ``ImportFrom`` (resolving ``from . import x``)."""
    if not node.level:
        return node.module
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _loaded_by_name(node, tree, known):
    """The modules an ``importlib.import_module(...)`` call loads: its string, or, for an f-string
    ``f"prefix.{...}"``, prefix + each string constant of the file that names a known module (the
    CLI's ``COMMANDS`` table names its command modules so)."""
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    if name != "import_module" or not node.args:
        return []
    arg = node.args[0]
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return [arg.value]
    if isinstance(arg, ast.JoinedStr) and arg.values and isinstance(arg.values[0], ast.Constant):
        prefix = arg.values[0].value
        constants = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
        # a dunder (``"__main__"``) is a module run as a program, not one loaded by name
        return sorted(prefix + c for c in constants if prefix + c in known and not c.startswith("__"))
    return []


def imports_of(module, path, known):
    """{imported module of ``known``: line} for every import statement anywhere in ``path``, and every
    module it loads by name through ``importlib.import_module``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    edges = {}
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Call):
            targets = _loaded_by_name(node, tree, known)
        elif isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            source = _absolute(module, path, node)
            # `from pkg import sub` imports the submodule; `from pkg import name` runs pkg/__init__.py.
            targets = [f"{source}.{alias.name}" if f"{source}.{alias.name}" in known else source
                       for alias in node.names]
        for target in targets:
            # `import a.b.c` of a known module, or the nearest known package above an unknown name
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != module:
                edges.setdefault(target, node.lineno)
    return edges


def import_graph(root, packages=PACKAGES):
    known = modules_under(root, packages)
    return known, {module: imports_of(module, path, known) for module, path in known.items()}


def upward_imports(known, graph):
    """'a.py:line imports b.py, a floor above it' for every import that points up."""
    found = []
    for module, edges in graph.items():
        for target, line in edges.items():
            if floor_of(target) > floor_of(module):
                found.append(f"{_rel(known[module])}:{line} imports {_rel(known[target])}, "
                             f"a floor above it ({_floor_name(target)} over {_floor_name(module)})")
    return sorted(found)


# What docs/architecture.md promises beyond the floors: (importer, never imported), by module prefix.
NEVER = (
    ("popvision_py.analysis", "engine"),  # the analysis reads a profile, never the emulator's rules
    ("dashboards", "engine"),  # the dashboard emulates through the runner the CLI hands it
    ("popvision_py.render", "engine"),  # the render renders the engine's figures, it computes none
)


def _under(module, prefix):
    return module == prefix or module.startswith(prefix + ".")


def forbidden_reaches(known, graph, never=NEVER):
    """'a.py -> b.py -> engine/c.py' for each module under a forbidden importer that reaches, directly or
    through other modules, a module under what it must never import (the shortest way, first found)."""
    found = []
    for source, banned in never:
        for module in sorted(m for m in graph if _under(m, source)):
            way = {module: None}
            queue = [module]
            hit = None
            while queue and hit is None:
                node = queue.pop(0)
                for target in sorted(graph[node]):
                    if target in way:
                        continue
                    way[target] = node
                    if _under(target, banned):
                        hit = target
                        break
                    queue.append(target)
            if hit is not None:
                chain = [hit]
                while way[chain[-1]] is not None:
                    chain.append(way[chain[-1]])
                found.append(" -> ".join(_rel(known[m]) for m in reversed(chain)))
    return found


# What the engine may take from popvision_py: the format it writes through, the errors, the version it
# stamps. Its planner's rules are its own (engine/rules.py), handed to the analysis by whoever opens a
# profile; a module of rules beside the format for the analysis to import would be a second home.
ENGINE_TAKES = ("popvision_py.format", "popvision_py.errors", "popvision_py.version")


def engine_takes_beyond_the_format(known, graph, allowed=ENGINE_TAKES):
    """'engine/a.py:line imports popvision_py/b.py' for each import by the engine of a popvision_py module
    outside ``allowed`` (which floor that module sits on does not matter)."""
    return sorted(f"{_rel(known[module])}:{line} imports {_rel(known[target])}"
                  for module, edges in graph.items() if _under(module, "engine")
                  for target, line in edges.items()
                  if _under(target, "popvision_py") and not any(_under(target, a) for a in allowed))


def circles(known, graph):
    """Each import circle, as 'a.py -> b.py -> a.py' (Tarjan's strongly connected components)."""
    index, low, stack, on_stack, components = {}, {}, [], set(), []

    def visit(start):
        # iterative Tarjan: (node, iterator over its targets)
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, targets = work[-1]
            advanced = False
            for target in targets:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                    advanced = True
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return [" <-> ".join(_rel(known[m]) for m in component) for component in sorted(components)]


def long_files(known, limit=MAX_LINES):
    lengths = {module: len(path.read_text(encoding="utf-8").splitlines()) for module, path in known.items()}
    return sorted(f"{_rel(known[m])} has {n} lines" for m, n in lengths.items() if n > limit)


# What the code outside the packages (tests, benchmarks, examples, scripts) may take from the CLI: the
# program, its list of commands and its --max-expansion environment variable, and each command
# module's click command. Anything else there is library code, which lives below the CLI.
CLI = "popvision_py.cli"
CLI_NAMES = frozenset({"main", "COMMANDS", "MAX_EXPANSION_ENV"})
COMMAND_NAMES = frozenset({"command"})
OUTSIDE = ("tests", "benchmarks", "examples", "scripts", "sample_profiles")


def _dotted(node):
    """``a.b.c`` for a chain of attributes on a name; None for anything else."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(parts)]) if isinstance(node, ast.Name) else None


def cli_library_uses(root, folders=OUTSIDE):
    """'file:line takes NAME from MODULE' for each name a file under ``folders`` takes from the CLI
    (``from popvision_py.cli[.M] import NAME``, or ``M.NAME`` on an imported CLI module) other than the
    program's (CLI_NAMES) and a command module's click command (COMMAND_NAMES)."""
    commands = {f"{CLI}.{path.stem}" for path in (root / "popvision_py" / "cli").glob("*.py")
                if path.stem not in ("__init__", "__main__")}

    def allowed(module, name):
        return name in (CLI_NAMES if module == CLI else COMMAND_NAMES)

    found = []
    for folder in folders:
        for path in sorted((root / folder).rglob("*.py")):
            where = path.relative_to(root).as_posix()
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            aliases = {}  # local name -> the CLI module it stands for
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    for alias in node.names:
                        if alias.asname and (alias.name == CLI or alias.name in commands):
                            aliases[alias.asname] = alias.name
                elif isinstance(node, ast.ImportFrom) and node.module in (CLI, "popvision_py", *commands):
                    for alias in node.names:
                        target = f"{node.module}.{alias.name}"
                        if target == CLI or target in commands:
                            aliases[alias.asname or alias.name] = target
                        elif node.module != "popvision_py" and not allowed(node.module, alias.name):
                            found.append((where, node.lineno, alias.name, node.module))
            for node in ast.walk(tree):
                chain = _dotted(node) if isinstance(node, ast.Attribute) else None
                if chain is None:
                    continue
                head, _, rest = chain.partition(".")
                chain = f"{aliases[head]}.{rest}" if head in aliases else chain
                module, _, name = chain.rpartition(".")
                if (module == CLI or module in commands) and chain not in commands and not allowed(module, name):
                    found.append((where, node.lineno, name, module))
    return [f"{where}:{line} takes {name} from {module}" for where, line, name, module in sorted(found)]


# The analysis' rooms (docs/architecture.md, "The analysis' rooms"): each room of popvision_py/analysis and
# the rooms it may import besides itself. The facade at the top of the package (FACADE) may import any room;
# no room imports the facade, and every other module of the analysis sits in a room.
ANALYSIS = "popvision_py.analysis"
ROOMS = {
    "common": (),
    "trace": ("common",),
    "ipu": ("common", "trace"),
    "host": ("common", "trace"),
    "imported": ("common", "trace"),
    "pipeline": ("common", "trace", "imported"),
    "findings": ("common", "trace", "ipu", "host", "imported", "pipeline"),
}
FACADE = ("report", "views", "gpu_view", "compare", "verify")


def room_of(module):
    """The room of an analysis module ("" for the facade's), None outside the analysis."""
    if not _under(module, ANALYSIS):
        return None
    first = module[len(ANALYSIS) + 1:].split(".")[0]
    return first if first in ROOMS else ""


def room_breaches(known, graph, rooms=ROOMS):
    """'a.py:line imports b.py (ROOM may import only ...)' for each import by a module of a room of an
    analysis module in another room it may not import, or in the facade."""
    found = []
    for module, edges in graph.items():
        room = room_of(module)
        if not room:
            continue
        for target, line in edges.items():
            other = room_of(target)
            if other is None or other == room or other in rooms[room]:
                continue
            allowed = ", ".join(rooms[room]) or "no other room"
            found.append(f"{_rel(known[module])}:{line} imports {_rel(known[target])} "
                         f"({room} may import only {allowed})")
    return sorted(found)


def modules_outside_the_rooms(known, facade=FACADE):
    """Each analysis module that sits in no room and is not one of the facade's."""
    return sorted(_rel(path) for module, path in known.items()
                  if room_of(module) == "" and module != ANALYSIS and module[len(ANALYSIS) + 1:] not in facade)


def rooms_their_docstrings_misdescribe(known, rooms=ROOMS):
    """'ROOM: ...' for each room whose ``__init__`` docstring does not name one of its modules (as
    ``name``), or whose "May import:" line names other rooms than ``rooms`` gives it."""
    found = []
    for room, allowed in rooms.items():
        package = f"{ANALYSIS}.{room}"
        if package not in known:
            found.append(f"{room}: no {package.replace('.', '/')}/__init__.py")
            continue
        doc = ast.get_docstring(ast.parse(known[package].read_text(encoding="utf-8"))) or ""
        for module in sorted(m for m in known if m.startswith(package + ".")):
            name = module.rpartition(".")[2]
            if f"``{name}``" not in doc:
                found.append(f"{room}: its docstring does not name ``{name}``")
        line = next((x for x in doc.split("\n\n") if x.startswith("May import:")), "")
        named = {r for r in rooms if f"``{r}``" in line}
        if named != set(allowed):
            found.append(f"{room}: its docstring says it may import {sorted(named)}, the rule {sorted(allowed)}")
    return found


def _rel(path):
    parts = path.parts
    for package in PACKAGES:
        if package in parts:
            return "/".join(parts[parts.index(package):])
    return str(path)


def _floor_name(module):
    return " / ".join(FLOORS[floor_of(module)])


# -- the contract, on the real tree ------------------------------------------------------------------

@pytest.fixture(scope="module")
def real_graph():
    return import_graph(ROOT)


def test_every_module_sits_on_a_floor(real_graph):
    known, _ = real_graph
    assert len(known) > 100
    for module in known:
        floor_of(module)


def test_no_module_imports_a_floor_above_it(real_graph):
    assert upward_imports(*real_graph) == []


# The one circle left, seen since the commands loaded by name are in the graph: `popvision sql` takes
# the Ctrl-C state from the CLI package that loads it. Issue 36 item 2 moves SQL out of the CLI
# (another branch); when it lands this list empties and the test says so.
KNOWN_CIRCLES: list[str] = []


def test_no_two_files_import_each_other_round_a_circle(real_graph):
    assert circles(*real_graph) == KNOWN_CIRCLES


def test_the_analysis_the_dashboard_and_the_render_never_reach_the_engine(real_graph):
    assert forbidden_reaches(*real_graph) == []


def test_the_engine_takes_from_popvision_py_only_the_format_the_errors_and_the_version(real_graph):
    assert engine_takes_beyond_the_format(*real_graph) == []


def test_the_planners_rules_are_the_engines_and_handed_in_from_above(real_graph):
    known, graph = real_graph
    # GIVEN the planner's rules, in the engine (issue 36): no module of them is left beside the format
    assert "engine.rules" in known and "popvision_py.planner_rules" not in known
    # THEN the engine's planner imports them, and the analysis' fixes are handed them by those who open
    # profiles: the facade and the report and dashboard commands (the analysis never reaches them:
    # test_the_analysis_the_dashboard_and_the_render_never_reach_the_engine)
    assert "engine.rules" in graph["engine.plan"]
    for opener in ("popvision_py", "popvision_py.cli.dashboard"):
        assert "engine.rules" in graph[opener], opener


def test_the_commands_loaded_by_name_are_in_the_graph(real_graph):
    # GIVEN the CLI, which imports each command's module by name when the command runs
    _, graph = real_graph
    # THEN each module COMMANDS names is an edge of popvision_py/cli/__init__.py, so the floors and circles see it
    from popvision_py.cli import COMMANDS
    loaded = {f"popvision_py.cli.{module}" for module, _ in COMMANDS.values()}
    assert loaded <= set(graph["popvision_py.cli"])


# Concepts with one class across packages (docs/architecture.md, "One name, one meaning"): PopTorch's
# stage and strategy classes are PopTorch's API, the engine's description of a partition is its own.
CONCEPTS = ("Stage", "PipelinedExecution", "ShardedExecution", "PhasedExecution", "Layout", "StageSpec")


def classes_defined(known):
    """{class name: sorted files defining it}, for every class of every module (nested ones too)."""
    found = {}
    for module, path in known.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                found.setdefault(node.name, []).append(_rel(path))
    return {name: sorted(files) for name, files in found.items()}


def classes_named(known, names=CONCEPTS):
    """{class name: sorted files defining it} for each of ``names`` defined at all."""
    return {name: files for name, files in classes_defined(known).items() if name in names}


# A class name defined in two modules is one word with two meanings; each class has its own name.
# The only exceptions are PopTorch's and PopDist's own APIs, which users' scripts name as Graphcore
# wrote them: each entry is a name, the files allowed to define it, and the real API that needs it.
SHARED_CLASS_NAMES = {
    # poptorch.Options is PopTorch's options class; Graphcore's popdist.poptorch.Options subclasses it
    # (PopRun's replicas and instance set), and scripts build either under the name Options.
    "Options": ("popdist/poptorch.py", "poptorch/_options.py"),
}


def repeated_class_names(known, allowed=SHARED_CLASS_NAMES):
    """'NAME: file, file' for each class name defined in more than one file, but those ``allowed``
    (a name is allowed in exactly the files listed for it)."""
    return [f"{name}: {', '.join(files)}" for name, files in sorted(classes_defined(known).items())
            if len(files) > 1 and tuple(files) != allowed.get(name)]


def test_one_class_per_concept_across_packages(real_graph):
    assert classes_named(real_graph[0]) == {
        "Stage": ["poptorch/_options.py"], "PipelinedExecution": ["poptorch/_options.py"],
        "ShardedExecution": ["poptorch/_options.py"], "PhasedExecution": ["poptorch/_options.py"],
        "Layout": ["engine/layout.py"], "StageSpec": ["engine/layout.py"]}


def test_no_class_name_is_defined_in_two_modules_but_poptorchs_and_popdists_api(real_graph):
    assert repeated_class_names(real_graph[0]) == []


def test_the_search_and_the_shim_describe_a_partition_with_the_engines_layout(real_graph):
    _, graph = real_graph
    assert "engine.layout" in graph["popvision_py.tune.space"]
    assert "engine.layout" in graph["poptorch._emulation"]
    assert "engine.layout" in graph["poptorch._options"]


def test_no_source_file_is_over_600_lines(real_graph):
    assert long_files(real_graph[0]) == []


def test_no_test_benchmark_or_example_takes_library_code_from_the_cli():
    assert cli_library_uses(ROOT) == []


def test_each_room_of_the_analysis_imports_only_the_rooms_it_may(real_graph):
    assert room_breaches(*real_graph) == []


def test_every_analysis_module_sits_in_a_room_or_is_the_facades(real_graph):
    known, _ = real_graph
    assert {room_of(m) for m in known if _under(m, ANALYSIS)} == {"", *ROOMS}
    assert modules_outside_the_rooms(known) == []


def test_each_rooms_docstring_names_its_modules_and_its_rule(real_graph):
    assert rooms_their_docstrings_misdescribe(real_graph[0]) == []


def test_architecture_page_draws_every_room():
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    for room in ROOMS:
        assert f"`analysis/{room}/`" in page, f"docs/architecture.md does not draw analysis/{room}/"


def test_architecture_page_names_every_floor():
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    for prefixes in FLOORS:
        for prefix in prefixes:
            assert f"`{prefix}`" in page, f"docs/architecture.md does not name {prefix}"


# -- the checker itself, on planted trees -------------------------------------------------------------

def _plant(tmp_path, files):
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    return import_graph(tmp_path)


BASE = {
    "popvision_py/__init__.py": "",
    "popvision_py/errors.py": "",
    "popvision_py/format/__init__.py": "from popvision_py.format.reader import open_profile\n",
    "popvision_py/format/reader.py": "from popvision_py import errors\ndef open_profile(p): ...\n",
    "popvision_py/analysis/__init__.py": "",
    "popvision_py/analysis/tables.py": "from popvision_py.format import open_profile\n",
    "engine/__init__.py": "",
    "engine/runner.py": "import popvision_py.format.reader\n",
    "poptorch/__init__.py": "",
    "dashboards/__init__.py": "",
}


def test_a_clean_planted_tree_passes(tmp_path):
    known, graph = _plant(tmp_path, BASE)
    assert graph["popvision_py.format.reader"] == {"popvision_py.errors": 1}
    assert graph["engine.runner"] == {"popvision_py.format.reader": 1}
    assert upward_imports(known, graph) == []
    assert circles(known, graph) == []


def test_a_planted_lazy_upward_import_is_named_with_both_files(tmp_path):
    files = dict(BASE)
    files["engine/runner.py"] = """\
        import popvision_py.format.reader

        def load(path):
            from poptorch import _script  # the bottom floor reaching up
            return _script
        """
    files["poptorch/_script.py"] = ""
    known, graph = _plant(tmp_path, files)
    assert upward_imports(known, graph) == [
        "engine/runner.py:4 imports poptorch/_script.py, a floor above it "
        "(poptorch / popdist / popvision_py.tune / dashboards / popvision_py.scripts / popvision_py.run_figures / "
        "popvision_py.emulation "
        "over engine / popvision_py.importer)"]


def test_a_planted_circle_through_a_package_init_is_named(tmp_path):
    files = dict(BASE)
    # writer takes the version from the package __init__, whose facade imports the analysis,
    # which imports the format: the circle the issue names.
    files["popvision_py/__init__.py"] = """\
        __version__ = "1"

        def open(path):
            from popvision_py.analysis.tables import Tables
            return Tables(path)
        """
    files["popvision_py/analysis/tables.py"] = "from popvision_py.format import writer\nclass Tables: ...\n"
    files["popvision_py/format/writer.py"] = "from popvision_py import __version__\n"
    known, graph = _plant(tmp_path, files)
    assert circles(known, graph) == [
        "popvision_py/__init__.py <-> popvision_py/analysis/tables.py <-> popvision_py/format/writer.py"]
    # ... and writer -> popvision_py/__init__ is also an upward import
    assert any(line.startswith("popvision_py/format/writer.py:1 imports popvision_py/__init__.py")
               for line in upward_imports(known, graph))


def test_a_planted_pair_that_imports_each_other_relatively_is_a_circle(tmp_path):
    files = dict(BASE)
    files["popvision_py/render/__init__.py"] = "from .html import page\n"
    files["popvision_py/render/html.py"] = ("from . import text\nfrom popvision_py.render import helper\n"
                                            "def page(): ...\n")
    files["popvision_py/render/text.py"] = ""
    known, graph = _plant(tmp_path, files)
    assert graph["popvision_py.render.html"] == {"popvision_py.render.text": 1, "popvision_py.render": 2}
    assert circles(known, graph) == ["popvision_py/render/__init__.py <-> popvision_py/render/html.py"]


def test_a_planted_long_file_is_named(tmp_path):
    files = dict(BASE)
    files["engine/model.py"] = "x = 1\n" * 601
    known, _ = _plant(tmp_path, files)
    assert long_files(known) == ["engine/model.py has 601 lines"]


def test_a_planted_analysis_module_reaching_the_engine_is_named_with_the_way(tmp_path):
    files = dict(BASE)
    # the analysis imports a helper of its own, which imports the planner: the engine, two steps away
    files["popvision_py/analysis/tables.py"] = "from popvision_py.analysis import helper\n"
    files["popvision_py/analysis/helper.py"] = "from engine import plan\n"
    files["engine/plan.py"] = ""
    known, graph = _plant(tmp_path, files)
    assert upward_imports(known, graph) == []  # the floors allow it: the analysis is above the engine
    assert forbidden_reaches(known, graph) == [
        "popvision_py/analysis/helper.py -> engine/plan.py",
        "popvision_py/analysis/tables.py -> popvision_py/analysis/helper.py -> engine/plan.py"]


def test_a_planted_dashboard_page_and_render_module_importing_the_engine_are_named(tmp_path):
    files = dict(BASE)
    files["dashboards/page.py"] = "def act():\n    import engine.runner\n"
    files["engine/runner.py"] = ""
    files["popvision_py/render/__init__.py"] = ""
    files["popvision_py/render/run_summary.py"] = "from engine.runner import x\n"
    known, graph = _plant(tmp_path, files)
    assert forbidden_reaches(known, graph) == ["dashboards/page.py -> engine/runner.py",
                                               "popvision_py/render/run_summary.py -> engine/runner.py"]


def test_a_planted_dashboard_reaching_the_engine_through_the_facade_is_named(tmp_path):
    files = dict(BASE)
    # GIVEN the facade, which hands the analysis the engine's rules, and a dashboard module and an
    # analysis module that open profiles through it
    files["popvision_py/__init__.py"] = "def open(path):\n    from engine import rules\n    return rules\n"
    files["engine/rules.py"] = ""
    files["dashboards/data.py"] = "import popvision_py as pv\n"
    files["popvision_py/analysis/verify.py"] = "def measured(path):\n    import popvision_py\n"
    known, graph = _plant(tmp_path, files)
    # THEN both are named with the way (the floors allow it: the facade is above the engine)
    assert upward_imports(known, graph) == []
    assert forbidden_reaches(known, graph) == [
        "popvision_py/analysis/verify.py -> popvision_py/__init__.py -> engine/rules.py",
        "dashboards/data.py -> popvision_py/__init__.py -> engine/rules.py"]


def test_a_planted_engine_module_taking_rules_from_beside_the_format_is_named(tmp_path):
    files = dict(BASE)
    # GIVEN the engine's planner taking its rules from a module beside the format (where they were)
    files["popvision_py/planner_rules.py"] = ""
    files["popvision_py/version.py"] = ""
    files["engine/plan.py"] = ("from popvision_py import planner_rules\nfrom popvision_py.errors import E\n"
                               "from popvision_py import version\n")
    known, graph = _plant(tmp_path, files)
    # THEN it is named (the errors and the version are the engine's to take, as the format in BASE is)
    assert engine_takes_beyond_the_format(known, graph) == [
        "engine/plan.py:1 imports popvision_py/planner_rules.py"]
    # AND the engine importing the analysis is named too, whatever the floors say of it
    files["engine/plan.py"] = "def fixes():\n    from popvision_py.analysis import tables\n"
    known, graph = _plant(tmp_path, files)
    assert engine_takes_beyond_the_format(known, graph) == [
        "engine/plan.py:2 imports popvision_py/analysis/tables.py"]


def test_a_planted_module_loaded_by_name_is_an_import(tmp_path):
    files = dict(BASE)
    # the engine loads a PopTorch module by name, as the CLI loads its commands: an upward import all the same
    files["engine/runner.py"] = """\
        import importlib

        NAMES = {"script": "_script"}

        def load(name):
            return importlib.import_module(f"poptorch.{NAMES[name]}")
        """
    files["poptorch/_script.py"] = ""
    known, graph = _plant(tmp_path, files)
    assert graph["engine.runner"] == {"poptorch._script": 6}
    assert upward_imports(known, graph)[0].startswith(
        "engine/runner.py:6 imports poptorch/_script.py, a floor above it")


def test_a_planted_class_name_in_two_modules_is_named_unless_it_is_an_allowed_api_mirror(tmp_path):
    files = dict(BASE)
    # GIVEN a Summary in the engine and in the analysis, a second Stage in the engine's layout, and
    # PopTorch's Options in both shims
    files["engine/instrument.py"] = "class Summary: ...\n"
    files["popvision_py/analysis/summary.py"] = "def figures():\n    class Summary: ...\n"
    files["engine/layout.py"] = "class StageSpec: ...\nclass Stage: ...\n"
    files["poptorch/_options.py"] = "class Options: ...\nclass Stage: ...\n"
    files["popdist/poptorch.py"] = "from poptorch import _options\nclass Options(_options.Options): ...\n"
    known, _ = _plant(tmp_path, files)
    # THEN the Summary and the Stage are named with both files (a nested class counts), the allowed Options
    # is not; and the concepts' placement check sees the second Stage too
    assert repeated_class_names(known) == ["Stage: engine/layout.py, poptorch/_options.py",
                                           "Summary: engine/instrument.py, popvision_py/analysis/summary.py"]
    assert classes_named(known) == {"Stage": ["engine/layout.py", "poptorch/_options.py"],
                                    "StageSpec": ["engine/layout.py"]}
    # ... and Options is named as soon as a third module defines it
    files["engine/options.py"] = "class Options: ...\n"
    known, _ = _plant(tmp_path, files)
    assert repeated_class_names(known)[0] == "Options: engine/options.py, popdist/poptorch.py, poptorch/_options.py"


def test_a_planted_test_taking_library_code_from_the_cli_is_named(tmp_path):
    files = dict(BASE)
    files["popvision_py/cli/__init__.py"] = "def main(): ...\ndef leave(code): ...\n"
    files["popvision_py/cli/sql.py"] = "def run_query(p, q): ...\ncommand = None\n"
    files["popvision_py/cli/run.py"] = "def _assumption(v): ...\ncommand = None\n"
    files["tests/test_cli.py"] = """\
        from popvision_py.cli import main, COMMANDS
        from popvision_py.cli.sql import command
        import popvision_py.cli.run
        """
    _plant(tmp_path, files)
    assert cli_library_uses(tmp_path) == []  # the program and the commands: a test of the CLI
    files["tests/test_sql.py"] = """\
        from popvision_py.cli.sql import command, run_query
        import popvision_py.cli.run
        from popvision_py import cli
        import popvision_py.cli.sql as sql

        def test_it():
            popvision_py.cli.run._assumption(())
            popvision_py.cli.run.command
            cli.leave(0)
            sql.run_query("p", "q")
        """
    _plant(tmp_path, files)
    assert cli_library_uses(tmp_path) == [
        "tests/test_sql.py:1 takes run_query from popvision_py.cli.sql",
        "tests/test_sql.py:7 takes _assumption from popvision_py.cli.run",
        "tests/test_sql.py:9 takes leave from popvision_py.cli",
        "tests/test_sql.py:10 takes run_query from popvision_py.cli.sql",
    ]


# A module of each room importing what its room may not: (room, the module it imports, why it may not).
PLANTED_BREACHES = (
    ("common", "trace/scan.py", "the shared columns below everything"),
    ("trace", "ipu/memory.py", "the fold knows no view"),
    ("ipu", "host/system.py", "a chip's views do not read the host's"),
    ("host", "pipeline/stages.py", "the host's figures need no stage"),
    ("imported", "pipeline/replay.py", "the replay builds on the ranks, not the other way"),
    ("pipeline", "ipu/exchange.py", "the pipeline's re-timing reads the trace, not the IPU views"),
    ("findings", "report.py", "no room imports the facade"),
)


PLANTED_ROOM_MODULES = ("common/tables.py", "trace/scan.py", "ipu/memory.py", "ipu/exchange.py", "host/system.py",
                        "pipeline/stages.py", "pipeline/replay.py", "report.py")


def _rooms_tree(extra):
    """BASE with a module or two in each room, ``extra`` ({path under analysis: text}) over them, and each
    room's ``__init__`` naming the modules planted in it and the rooms ROOMS lets it import."""
    modules = {name: "" for name in PLANTED_ROOM_MODULES} | extra
    files = {k: v for k, v in BASE.items() if k != "popvision_py/analysis/tables.py"}
    for room, allowed in ROOMS.items():
        names = [name.split("/")[1][:-3] for name in modules if name.startswith(f"{room}/")]
        may = ", ".join(f"``{r}``" for r in allowed) or "nothing"
        files[f"popvision_py/analysis/{room}/__init__.py"] = (
            f'"""``{room}``: {", ".join(f"``{n}``" for n in names)}.\n\nMay import: {may}.\n"""\n')
    files.update({f"popvision_py/analysis/{name}": text for name, text in modules.items()})
    return files


def test_a_planted_tree_of_rooms_that_keeps_the_rules_passes(tmp_path):
    files = _rooms_tree({"pipeline/whatif.py": "from popvision_py.analysis.pipeline import replay\n"
                                               "from popvision_py.analysis.trace.scan import x\n"})
    known, graph = _plant(tmp_path, files)
    assert room_breaches(known, graph) == []
    assert modules_outside_the_rooms(known) == []
    assert rooms_their_docstrings_misdescribe(known) == []


@pytest.mark.parametrize(("room", "target", "why"), PLANTED_BREACHES, ids=[b[0] for b in PLANTED_BREACHES])
def test_a_planted_import_across_a_rooms_rule_is_named(tmp_path, room, target, why):
    # GIVEN a module of ROOM that imports, lazily, a module its room may not import
    dotted = "popvision_py.analysis." + target[:-3].replace("/", ".")
    files = _rooms_tree({f"{room}/planted.py": f"def f():\n    import {dotted}\n"})
    known, graph = _plant(tmp_path, files)
    # THEN the breach is named with both files and the room's rule
    allowed = ", ".join(ROOMS[room]) or "no other room"
    assert room_breaches(known, graph) == [
        f"popvision_py/analysis/{room}/planted.py:2 imports popvision_py/analysis/{target} "
        f"({room} may import only {allowed})"], why


def test_a_planted_module_outside_the_rooms_and_a_room_misdescribed_are_named(tmp_path):
    # GIVEN a module dropped at the top of the analysis, and a room module its docstring does not name
    files = _rooms_tree({"helpers.py": ""})
    files["popvision_py/analysis/ipu/tiles.py"] = ""
    files["popvision_py/analysis/host/__init__.py"] = '"""``system``.\n\nMay import: ``common``, ``ipu``."""\n'
    known, _ = _plant(tmp_path, files)
    # THEN each is named
    assert modules_outside_the_rooms(known) == ["popvision_py/analysis/helpers.py"]
    assert rooms_their_docstrings_misdescribe(known) == [
        "ipu: its docstring does not name ``tiles``",
        "host: its docstring says it may import ['common', 'ipu'], the rule ['common', 'trace']"]
