"""The scripts users run live in examples/ (issue 36, item 4): the README and docs run them from there,
never from tests/, each one they name exists, and examples/README.md says what each example is. They
are the project's own scripts (issue 47), so the linter reads them as it reads the rest of the code."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "examples" / "README.md")
FENCE = re.compile(r"^```[a-z]*\n(.*?)^```", re.S | re.M)
# a script a shown command runs: `python X.py`, `popvision run|tune X.py`, `poprun ... python X.py`
RUNS = re.compile(r"(?:python|popvision (?:run|tune))\s+(\S+\.py)\b")


def scripts_run(docs=DOCS, root=ROOT) -> dict[str, list[str]]:
    """{script path as written: ['doc:line', ...]} for each script a code block of ``docs`` runs."""
    found: dict[str, list[str]] = {}
    for doc in docs:
        text = doc.read_text(encoding="utf-8")
        for block in FENCE.finditer(text):
            first = text.count("\n", 0, block.start(1)) + 1
            for offset, line in enumerate(block.group(1).splitlines()):
                for script in RUNS.findall(line):
                    found.setdefault(script, []).append(f"{doc.relative_to(root)}:{first + offset}")
    return found


def test_the_docs_run_no_script_from_tests_and_every_example_they_run_exists():
    # GIVEN every script a README or docs code block tells a user to run
    scripts = scripts_run()
    assert "examples/mnist_pipeline.py" in scripts and "examples/tutorial_mnist.py" in scripts
    # THEN none is under tests/, and each one named with its folder is a file of the repository
    assert not {s: where for s, where in scripts.items() if s.startswith("tests/")}
    assert not {s: where for s, where in scripts.items() if s.startswith("examples/") and not (ROOT / s).is_file()}


def test_the_examples_readme_says_what_each_example_is_and_the_tests_run_them():
    readme = (ROOT / "examples" / "README.md").read_text(encoding="utf-8")
    examples = sorted(p.name for p in (ROOT / "examples").glob("*.py"))
    assert examples == ["mnist_pipeline.py", "tutorial_mnist.py"]
    for name in examples:
        assert f"| `{name}` |" in readme and f"examples/{name}" in readme
    # the tests use the very files the README runs
    for conftest, name in (("poptorch", "mnist_pipeline.py"), ("popdist", "tutorial_mnist.py")):
        text = (ROOT / "tests" / conftest / "conftest.py").read_text(encoding="utf-8")
        assert f'EXAMPLE = REPO / "examples" / "{name}"' in text


def test_each_example_says_it_is_the_projects_own_and_the_linter_reads_them():
    # GIVEN each example's module docstring
    for path in sorted((ROOT / "examples").glob("*.py")):
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
        # THEN it says whose it is, and claims to be no other project's copy
        assert doc and "popvision's own example" in doc, path.name
        assert not re.search(r"verbatim|unchanged but for|in the style of", doc), path.name
    # AND ruff's configuration leaves examples/ in (pyproject.toml's extend-exclude does not name it)
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    excluded = re.search(r"^extend-exclude = \[(.*?)\]", pyproject, re.M)
    assert excluded and "examples" not in excluded.group(1)


def test_a_doc_running_a_script_from_tests_is_named(tmp_path):
    # GIVEN a README that runs a script kept among the tests (as this one did before issue 36)
    doc = tmp_path / "README.md"
    doc.write_text("Run it:\n\n```\npip install x\npoprun --num-instances 2 python tests/popdist/tutorial_mnist.py\n"
                   "popvision run examples/mnist_pipeline.py --profile\n```\n")
    # THEN the check finds it, with its line
    assert scripts_run((doc,), tmp_path) == {"tests/popdist/tutorial_mnist.py": ["README.md:5"],
                                             "examples/mnist_pipeline.py": ["README.md:6"]}
