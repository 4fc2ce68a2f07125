"""`python -m popvision_py.cli` runs the `popvision` command."""

from popvision_py.cli import main

if __name__ == "__main__":  # not when a spawned process (a Dask worker of `popvision tune`) imports it
    main(prog_name="popvision")
