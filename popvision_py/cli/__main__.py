"""`python -m popvision_py.cli` runs the `popvision` command."""

from popvision_py.cli import main

main(prog_name="popvision")
