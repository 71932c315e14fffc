"""The arrows between the product's modules: no import circle, and none of the forbidden arrows.

The import graph of ``training_core``, ``components``, ``pipelines`` and the Vertex AI emulator
beside them (``vertex_emulator``) is read from their source with ``ast`` (module-level and
function-level imports alike: a function-local import is still an arrow), so nothing is imported
to build it. See docs/architecture.md ("Arrows that must never exist").
"""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("training_core", "components", "pipelines", "vertex_emulator")

# The emulator, a package beside the product, and the only product module allowed to import it:
# the CLI command that runs it. The emulator builds on the product's run plan
# (``pipelines.run_plan``) and on ``training_core``, never on the CLI, its commands or submit.
VERIFY = "vertex_emulator"
VERIFY_COMMAND = "pipelines.commands.verify"
# The CLI and its subcommands: the CLI loads them (importlib), so none imports it back.
CLI = "pipelines.cli"
COMMANDS = "pipelines.commands"

# The core's stages (training_core/<stage>/), and the stages each may import besides itself. Data
# prep knows nothing of what trains on it; training knows nothing of how it is scored (the trainer
# takes any ``Evaluator``); evaluation rebuilds the model, so it imports training; it never needs
# the export; ``common`` is what every stage shares and imports none of them.
STAGE_MAY_IMPORT = {
    "common": set(),
    "data": {"common"},
    "training": {"common", "data"},
    "evaluation": {"common", "data", "training"},
    "serving": {"common", "data", "training", "evaluation"},
}

# Forbidden arrows that still exist, (importer, imported package), each with what removes it.
# Every other forbidden arrow fails the test at once; one of these that is gone fails it too, so
# that this list only shrinks. Both are kept because removing them changes a component's body,
# and with it every compiled template (docs/architecture.md, "Arrows still to remove").
KNOWN_FORBIDDEN: dict[tuple[str, str], str] = {
    ("training_core.training.loop", "training_core.evaluation"): (
        "train(): the trainer composed with the evaluation for components/train_model.py; goes "
        "when the component builds the Evaluator itself and calls training.trainer"
    ),
    ("components.run_report", "pipelines"): (
        "the run report's page is rendered by pipelines.run_report; goes when its page moves "
        "to training_core (the report kit is there already) and the component imports that"
    ),
}


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, pathlib.Path]:
    """Every product module's dotted name and its source file."""
    return {
        _module_name(path): path for package in PACKAGES for path in (ROOT / package).rglob("*.py")
    }


def _imported(node: ast.AST, module: str, is_package: bool) -> list[str]:
    """The dotted names one import statement imports (``from X import Y`` gives ``X.Y`` too)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    assert isinstance(node, ast.ImportFrom)
    base = node.module or ""
    if node.level:
        package = module.split(".") if is_package else module.split(".")[:-1]
        package = package[: len(package) - (node.level - 1)]
        base = ".".join(package + ([base] if base else []))
    return [base] + [f"{base}.{alias.name}" for alias in node.names]


def _graph() -> dict[str, dict[str, set[str]]]:
    """Module -> {"internal": product modules it imports, "external": every name it imports}."""
    modules = _modules()
    graph: dict[str, dict[str, set[str]]] = {}
    for name, path in modules.items():
        internal: set[str] = set()
        external: set[str] = set()
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            for target in _imported(node, name, path.name == "__init__.py"):
                external.add(target)
                if target in modules and target != name:
                    internal.add(target)
        # ``from pkg import name`` where ``pkg.name`` is a module is an arrow to that module only;
        # where it is not, the arrow is to ``pkg``. Drop ``pkg`` when a submodule was meant.
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                base = _imported(node, name, path.name == "__init__.py")[0]
                if all(f"{base}.{a.name}" in modules for a in node.names):
                    internal.discard(base)
        graph[name] = {"internal": internal, "external": external}
    # The CLI loads its subcommands by name (importlib), an arrow no import statement shows.
    for command in _cli_command_modules():
        graph[CLI]["internal"].add(command)
        graph[CLI]["external"].add(command)
    return graph


def _cli_command_modules() -> list[str]:
    """The modules ``pipelines.cli`` loads with importlib: ``COMMAND_MODULES``, read with ast."""
    tree = ast.parse((ROOT / "pipelines" / "cli.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "COMMAND_MODULES" for t in node.targets
        ):
            return [f"{COMMANDS}.{name}" for name in ast.literal_eval(node.value)]
    raise AssertionError("pipelines/cli.py has no COMMAND_MODULES")


def _cycles(graph: dict[str, dict[str, set[str]]]) -> list[list[str]]:
    """Every import circle, one per strongly connected component, as a path that closes."""
    return [_closing_path(graph, set(c)) for c in _tangles(graph)]


def _tangles(graph: dict[str, dict[str, set[str]]]) -> list[list[str]]:
    """The strongly connected components of more than one module (each holds a circle)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def connect(node: str) -> None:  # Tarjan's algorithm.
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]["internal"]):
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
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

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return components


def _closing_path(graph: dict[str, dict[str, set[str]]], component: set[str]) -> list[str]:
    """One circle inside a strongly connected component: ``a -> b -> ... -> a``."""
    start = min(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:  # Breadth first, so the circle named is a short one.
        following = []
        for node in frontier:
            for target in sorted(graph[node]["internal"] & component):
                if target == start:
                    return paths[node] + [start]
                if target not in paths:
                    paths[target] = paths[node] + [target]
                    following.append(target)
        frontier = following
    raise AssertionError(f"no circle through {start}")


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def _stage(name: str) -> str | None:
    """The core's stage a module belongs to (``training_core.<stage>...``), if any."""
    parts = name.split(".")
    if parts[0] == "training_core" and len(parts) > 1 and parts[1] in STAGE_MAY_IMPORT:
        return parts[1]
    return None


def _forbidden(graph: dict[str, dict[str, set[str]]]) -> list[str]:
    """Every arrow that must never exist, as ``importer -> imported (rule)``."""
    found = []
    for module, imports in sorted(graph.items()):
        for target in sorted(imports["external"]):
            rule = None
            stage, target_stage = _stage(module), _stage(target)
            if (
                stage in STAGE_MAY_IMPORT
                and target_stage not in (None, stage)
                and target_stage not in STAGE_MAY_IMPORT[stage]
            ):
                rule = f"{stage} does not import {target_stage}"
            elif _within(module, "training_core") and target == "training_core.tune":
                rule = "tuning sits on top of the stages"
            elif _within(module, "training_core"):
                for outside in (
                    "kfp",
                    "google_cloud_pipeline_components",
                    "pipelines",
                    "components",
                    VERIFY,
                ):
                    if _within(target, outside):
                        rule = f"the core imports no {outside}"
            elif _within(module, "pipelines.submit") and _within(target, VERIFY):
                rule = "submit does not import the emulator that checks it"
            elif _within(module, "components") and _within(target, "pipelines"):
                rule = "components are thin over training_core; they import no pipelines"
            elif _within(module, COMMANDS) and _within(target, CLI):
                rule = f"{CLI} loads the commands; they import {COMMANDS}._shared, not it"
            elif _within(module, VERIFY) and any(
                _within(target, p) for p in (CLI, COMMANDS, "pipelines.submit")
            ):
                rule = "the emulator builds on pipelines.run_plan, not on the CLI or submit"
            if (
                rule is None
                and _within(target, VERIFY)
                and not _within(module, VERIFY)
                and module != VERIFY_COMMAND
            ):
                rule = f"only {VERIFY_COMMAND} imports the emulator"
            if rule:
                found.append(f"{module} -> {target} ({rule})")
    return found


@pytest.fixture(scope="module")
def graph() -> dict[str, dict[str, set[str]]]:
    return _graph()


def test_the_graph_sees_every_package_and_function_level_imports(graph):
    # The reader itself: if it missed function-local imports or a package, the checks below
    # would pass for the wrong reason.
    assert {m.split(".")[0] for m in graph} == set(PACKAGES)
    assert "pipelines.pipeline" in graph["pipelines.local_run"]["internal"]  # Inside a function.
    assert "pipelines.commands._shared" in graph["pipelines.commands.verify"]["internal"]
    assert "vertex_emulator" in graph["pipelines.commands.verify"]["internal"]
    assert "pipelines.run_plan.plan" in graph["vertex_emulator.run"]["internal"]
    # The CLI's dynamic loading is in the graph: a command importing the CLI would be a circle.
    assert "pipelines.commands.verify" in graph[CLI]["internal"]
    assert len(_cli_command_modules()) == 15


def test_no_import_circle(graph):
    tangles = _tangles(graph)
    assert not tangles, "import circles:\n" + "\n".join(
        " -> ".join(_closing_path(graph, set(t))) + f"\n  (all in one circle: {', '.join(t)})"
        for t in tangles
    )


def _known(arrow: str) -> tuple[str, str] | None:
    importer, _, imported = arrow.partition(" -> ")
    imported = imported.split(" (")[0]
    for module, package in KNOWN_FORBIDDEN:
        if importer == module and _within(imported, package):
            return module, package
    return None


def test_no_forbidden_arrow(graph):
    found = _forbidden(graph)
    new = [arrow for arrow in found if _known(arrow) is None]
    assert not new, "forbidden arrows:\n" + "\n".join(new)
    gone = set(KNOWN_FORBIDDEN) - {_known(arrow) for arrow in found}
    assert not gone, f"no longer imported, take off KNOWN_FORBIDDEN: {sorted(gone)}"


def test_the_checks_catch_a_planted_circle_and_arrows():
    planted = {
        "pipelines.a": {"internal": {"pipelines.b"}, "external": {"pipelines.b"}},
        "pipelines.b": {"internal": {"pipelines.a"}, "external": {"pipelines.a"}},
        "pipelines.submit": {"internal": set(), "external": {"vertex_emulator.run"}},
        "training_core.x": {"internal": set(), "external": {"kfp.dsl"}},
        "pipelines.commands.verify": {"internal": set(), "external": {"vertex_emulator"}},
        # The emulator: imported by the verify command only, itself on the run plan and the core.
        "pipelines.local_run": {"internal": set(), "external": {"vertex_emulator.job_service"}},
        "components.train_model": {"internal": set(), "external": {"vertex_emulator"}},
        "training_core.common.y": {"internal": set(), "external": {"vertex_emulator.shim"}},
        "vertex_emulator.run": {
            "internal": set(),
            "external": {"pipelines.run_plan.plan", "training_core.common.atomic_writes"},
        },
        "vertex_emulator.z": {"internal": set(), "external": {"pipelines.commands._shared"}},
        "training_core.data.x": {"internal": set(), "external": {"training_core.training.loop"}},
        "training_core.training.x": {
            "internal": set(),
            "external": {"training_core.evaluation.evaluate", "training_core.data.io"},
        },
        "components.x": {"internal": set(), "external": {"pipelines.run_report", "training_core"}},
        "training_core.evaluation.x": {"internal": set(), "external": {"training_core.serving"}},
        "training_core.common.x": {"internal": set(), "external": {"training_core.tune"}},
        # A command importing the CLI that loads it (the CLI's arrow as _graph adds it).
        "pipelines.cli": {"internal": {"pipelines.commands.y"}, "external": set()},
        "pipelines.commands.y": {"internal": {"pipelines.cli"}, "external": {"pipelines.cli"}},
    }
    assert _cycles(planted) == [
        ["pipelines.a", "pipelines.b", "pipelines.a"],
        ["pipelines.cli", "pipelines.commands.y", "pipelines.cli"],
    ]
    assert _forbidden(planted) == [
        "components.train_model -> vertex_emulator "
        "(only pipelines.commands.verify imports the emulator)",
        "components.x -> pipelines.run_report "
        "(components are thin over training_core; they import no pipelines)",
        "pipelines.commands.y -> pipelines.cli "
        "(pipelines.cli loads the commands; they import pipelines.commands._shared, not it)",
        "pipelines.local_run -> vertex_emulator.job_service "
        "(only pipelines.commands.verify imports the emulator)",
        "pipelines.submit -> vertex_emulator.run "
        "(submit does not import the emulator that checks it)",
        "training_core.common.x -> training_core.tune (tuning sits on top of the stages)",
        "training_core.common.y -> vertex_emulator.shim (the core imports no vertex_emulator)",
        "training_core.data.x -> training_core.training.loop (data does not import training)",
        "training_core.evaluation.x -> training_core.serving (evaluation does not import serving)",
        "training_core.training.x -> training_core.evaluation.evaluate "
        "(training does not import evaluation)",
        "training_core.x -> kfp.dsl (the core imports no kfp)",
        "vertex_emulator.z -> pipelines.commands._shared "
        "(the emulator builds on pipelines.run_plan, not on the CLI or submit)",
    ]
