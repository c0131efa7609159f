"""The controller's layout: subpackages by concern whose imports run one way (README.md, "Layout").

Every `kdakit...` import in the tree, module-level or inside a function, is checked against LAYERS: a
layer may import only the layers it lists, and those lists form no cycle.
"""

from __future__ import annotations

import ast
import tomllib
from graphlib import TopologicalSorter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Folder -> import name, as pyproject.toml maps them.
PACKAGE_DIRS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]

# Layer -> the layers it may import. "facts" (kdakit.facts) is what both the controller and the kernels read;
# the run-time kernels read nothing else of the controller. kernels/tools (bench, autotune: never imported by
# SGLang) writes result records, so it reads records too; records reads only facts, so nothing runs back.
LAYERS = {
    "facts": set(),
    "launch": {"facts"},
    "records": {"facts"},
    "kernels": {"facts"},
    "kernels.tools": {"facts", "records", "kernels"},
    "measure": {"facts", "launch", "records"},
    "bench": {"facts", "launch", "records", "measure"},
    "evals": {"facts", "launch", "records", "measure"},
    "checks": {"facts", "records", "kernels", "kernels.tools"},
    "report": {"facts", "records", "measure"},
    "slurm": {"facts", "launch", "records"},
    # a run from its id to its report: the visit loop over a scheduler backend (Ansible, kdakit.slurm)
    "run": {"facts", "launch", "records", "checks", "slurm"},
}
LAYERS["cli"] = set(LAYERS)  # the command line wires every layer
# The harnesses: they may read the controller's core, the core (kdakit/) and the Slurm backend (slurm/) never
# read them; their shared facts (the serving and GSM8K protocols) live in kdakit.facts. kdakit/cli.py only
# names their modules for a lazy import.
HARNESSES = ("kdakit.bench", "kdakit.evals")


def layer_of(module: str) -> str:
    if module in ("kdakit", "kdakit.facts") or module.startswith("kdakit.facts."):
        return "facts"
    if module in ("kdakit.cli", "kdakit.__main__"):
        return "cli"
    parts = module.split(".")
    if parts[1] == "kernels":
        return "kernels.tools" if parts[2:3] == ["tools"] else "kernels"
    assert parts[1] in LAYERS, f"{module}: no layer (add its subpackage to LAYERS)"
    return parts[1]


def module_files() -> dict[str, Path]:
    files = {}
    for name, folder in PACKAGE_DIRS.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = [name, *path.relative_to(ROOT / folder).with_suffix("").parts]
            files.setdefault(".".join(parts[:-1] if parts[-1] == "__init__" else parts), path)
    return files


def kdakit_imports(module: str, path: Path) -> set[str]:
    found = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + [base])
            found |= {f"{base}.{a.name}" for a in node.names} | {base}
    return {name for name in found if name == "kdakit" or name.startswith("kdakit.")}


def _known(name: str, modules: set[str]) -> str:
    """The module an import names: `kdakit.records.stats` for `from kdakit.records import stats`."""
    while name not in modules and "." in name:
        name = name.rpartition(".")[0]
    return name


def test_the_layers_form_no_cycle():
    TopologicalSorter(LAYERS).static_order()  # raises CycleError


def test_every_import_runs_the_way_the_layers_allow():
    files = module_files()
    wrong = []
    for module, path in sorted(files.items()):
        mine = layer_of(module)
        for imported in kdakit_imports(module, path):
            theirs = layer_of(_known(imported, set(files)))
            if theirs != mine and theirs not in LAYERS[mine]:
                wrong.append(f"{module} ({mine}) imports {imported} ({theirs})")
    assert wrong == []


def _wrong_way(module: str, source: str, tmp_path: Path) -> set[str]:
    planted = tmp_path / "planted.py"
    planted.write_text(source)
    imported = kdakit_imports(module, planted)
    mine = layer_of(module)
    return {layer_of(_known(i, set(module_files()))) for i in imported} - LAYERS[mine] - {mine}


def test_the_layout_check_catches_a_wrong_way_import(tmp_path):
    assert _wrong_way("kdakit.facts.pins", "from kdakit.records import stats\n", tmp_path) == {"records"}
    assert _wrong_way("kdakit.facts.profiles", "from kdakit.launch import plan\n", tmp_path) == {"launch"}
    assert _wrong_way("kdakit.kernels.decode", "from kdakit.checks import selftest\n", tmp_path) == {"checks"}
    assert _wrong_way("kdakit.kernels.integration", "import kdakit.records.stats\n", tmp_path) == {"records"}
    assert _wrong_way("kdakit.kernels.tools.bench", "from kdakit.report import model\n", tmp_path) == {
        "report"
    }


# The folders whose modules never import a harness: the core and the Slurm backend.
NO_HARNESS = (ROOT / "kdakit", ROOT / "slurm")


def core_imports_of_harnesses(files: dict[str, Path], core: tuple[Path, ...] = NO_HARNESS) -> list[str]:
    """Every import of kdakit.bench or kdakit.evals by a module under kdakit/ (core) or slurm/."""
    wrong = []
    for module, path in sorted(files.items()):
        if not any(path.is_relative_to(folder) for folder in core):
            continue
        for imported in sorted(kdakit_imports(module, path)):
            if imported in HARNESSES or imported.startswith(tuple(h + "." for h in HARNESSES)):
                wrong.append(f"{module} imports {imported}")
    return wrong


def test_the_core_and_slurm_never_import_the_bench_or_evals_harnesses():
    """bench/ and evals/ import the core (facts, launch, records, measure); nothing under kdakit/ or slurm/
    imports them back, neither at module level nor inside a function, and no layer of theirs lists them."""
    files = module_files()
    assert core_imports_of_harnesses(files) == []
    core = {layer_of(m) for m, path in files.items() if any(path.is_relative_to(f) for f in NO_HARNESS)}
    assert "slurm" in core
    assert {layer for layer in core - {"cli"} if LAYERS[layer] & {"bench", "evals"}} == set()


def test_the_harness_check_catches_a_core_or_slurm_module_importing_the_bench_or_evals(tmp_path):
    core, slurm = tmp_path / "kdakit", tmp_path / "slurm"
    (core / "report").mkdir(parents=True)
    slurm.mkdir()
    (core / "report" / "model.py").write_text("def f():\n    from kdakit.bench.serving import DATASETS\n")
    (core / "run.py").write_text("import kdakit.evals.gsm8k\n")
    (slurm / "script.py").write_text("def f():\n    from kdakit.evals.gsm8k import load_protocols\n")
    harness = tmp_path / "bench" / "serving.py"
    harness.parent.mkdir()
    harness.write_text("from kdakit.facts.protocols import load_protocols\nfrom kdakit.bench import x\n")
    files = {"kdakit.report.model": core / "report" / "model.py", "kdakit.run": core / "run.py",
             "kdakit.slurm.script": slurm / "script.py", "kdakit.bench.serving": harness}  # fmt: skip
    assert core_imports_of_harnesses(files, (core, slurm)) == [
        "kdakit.report.model imports kdakit.bench.serving",
        "kdakit.report.model imports kdakit.bench.serving.DATASETS",
        "kdakit.run imports kdakit.evals.gsm8k",
        "kdakit.slurm.script imports kdakit.evals.gsm8k",
        "kdakit.slurm.script imports kdakit.evals.gsm8k.load_protocols",
    ]


def test_the_kernels_read_only_the_facts_package_of_the_controller():
    """The run-time kernels (kernels/, kernels/integration/) import kdakit.facts and themselves, nothing else;
    the facts package imports no other part of kdakit."""
    wrong = []
    for module, path in sorted(module_files().items()):
        runtime_kernel = module.startswith("kdakit.kernels") and not module.startswith("kdakit.kernels.tools")
        if not (runtime_kernel or layer_of(module) == "facts"):
            continue
        allowed = ("kdakit.facts", "kdakit.kernels") if runtime_kernel else ("kdakit.facts",)
        for imported in kdakit_imports(module, path):
            if imported != "kdakit" and not imported.startswith(tuple(a + "." for a in allowed) + allowed):
                wrong.append(f"{module} imports {imported}")
    assert wrong == []


def test_every_package_folder_is_one_the_readme_names():
    readme = (ROOT / "README.md").read_text()
    layout = readme.split("## Layout", 1)[1].split("\n## ", 1)[0]
    for name, folder in PACKAGE_DIRS.items():
        assert f"`{folder}/`" in layout, f"README's Layout does not name {folder}/ ({name})"
        if name != folder.replace("/", "."):
            assert f"`{name}`" in layout, f"README's Layout does not state that {folder}/ imports as {name}"
