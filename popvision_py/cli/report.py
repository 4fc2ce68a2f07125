"""`popvision report PROFILE`: the reports of one profile as text, JSON, CSV, Markdown or HTML."""

from __future__ import annotations

import sys
from pathlib import Path

import click

SECTION_CHOICES = ["overview", "all", "summary", "memory", "liveness", "stages", "exchange", "operations", "programs",
                   "tiles", "system", "critical-path", "gpu"]
COMPARE_CHOICES = ["all", "summary", "memory", "liveness", "stages", "exchange"]
FORMAT_CHOICES = ["text", "json", "csv", "md", "html"]


def output_options(func=None, *, sections: list[str] = SECTION_CHOICES, default: str | None = "all",
                   section_help: str = "Which report."):
    """--section (one of ``sections``), --format and -o, shared by `report` and `compare`."""
    if func is None:
        return lambda f: output_options(f, sections=sections, default=default, section_help=section_help)
    func = click.option("-o", "--output", type=click.Path(), default=None,
                        help="Write here (atomically) instead of stdout; a folder for csv. Required "
                             "for csv and html.")(func)
    func = click.option("--format", "fmt", type=click.Choice(FORMAT_CHOICES), default="text", show_default=True,
                        help="Output format.")(func)
    func = click.option("--section", type=click.Choice(sections), default=default, show_default=default is not None,
                        help=section_help)(func)
    return func


def finish(written: list) -> None:
    for path in written:
        click.echo(f"Wrote {path}", err=True)


@click.command("report")
@click.argument("profile", type=click.Path())  # a profile.pop, or a run's folder (popvision_py.format.runs)
@output_options(default=None, section_help="Which report (gpu: a GPU trace's kernels, what bound each step, idle, "
                "compute and overlaps, beside Holistic Trace Analysis 0.5's figures) [default: overview in text and "
                "md, the four questions and the findings on one screen, naming the sections to ask for next; all in "
                "json, csv and html].")
@click.option("--verify", is_flag=True, help="Run each fix the insights suggest in the emulator and show its "
              "measured effect beside the predicted one.")
@click.option("--verify-dir", type=click.Path(file_okay=False), default=None,
              help="Where --verify writes each fix's profile, as TAG/profile.pop [default: verify/ beside PROFILE].")
@click.option("--system", "system", multiple=True, type=click.Path(),
              help="System timeline files (*.pvti.parquet) or folders to report on [default: those in PROFILE's "
                   "folder's system/, PROFILE's folder, its parent, or a poprun run's folder].")
@click.option("--scheduler", metavar="tcp://HOST:PORT",
              help="Make the GPU section's figures on an existing Dask cluster: its scheduler's address. Its workers "
                   "read the ranks' kernels a few ranks a task; they must see PROFILE at the same path.")
def command(profile: str, section: str, fmt: str, output: str | None, verify: bool, verify_dir: str | None,
            system: tuple[str, ...], scheduler: str | None) -> None:
    """Report on PROFILE: summary and insights, memory, liveness, stages, exchange, operations (each op's
    cycles, FLOPs and memory, by op, block and layer), the program tree, tile balance, the host processes'
    system timeline, and a GPU trace's kernels (gpu). PROFILE may be a run's folder: with several poprun
    instances, the figures that differ between them come first. With --scheduler, the GPU figures' pass over
    every rank runs on a Dask cluster's workers (the same report)."""
    if section is None:
        section = "overview" if fmt in ("text", "md") else "all"
    import popvision_py
    from popvision_py.render.progress import reading_trace
    from popvision_py.format.runs import run_profiles
    from popvision_py.render import emit
    from popvision_py.render.document import add_instances, add_verification, build_report

    if output is not None and fmt != "csv":
        from popvision_py.format.atomic import check_output
        check_output(output)  # a destination that would be refused is refused before the report is made
    runs = run_profiles(profile)
    profile = str(runs[0][1])
    from popvision_py.tune.cluster import scheduler_client

    with popvision_py.open(profile, system or None) as report, scheduler_client(scheduler) as client:
        report.cluster = client  # None: the GPU figures made here
        with reading_trace([report]):
            doc = build_report(report, section, figures=fmt == "html")
        if len(runs) > 1:
            add_instances(doc, runs, report)
        if verify:
            add_verification(doc, _verify(report, Path(verify_dir) if verify_dir else Path(profile).parent / "verify"))
        finish(emit(doc, fmt, output))


def _verify(report, folder: Path):
    """Every fix run into ``folder/TAG/profile.pop``; a progress bar on a terminal."""
    from tqdm import tqdm

    from popvision_py.analysis import verify
    from popvision_py.emulation import run_fields
    from popvision_py.format.atomic import check_writable

    fixes = verify.fix_runs(report)
    if fixes:
        check_writable(folder)  # a folder that cannot be written fails before the first run, in one sentence
    with tqdm(total=len(fixes), desc="Verifying fixes", unit="fix", file=sys.stderr,
              disable=not sys.stderr.isatty(), leave=False) as bar:
        return verify.verify(report, run_fields, folder, lambda fix: (bar.set_postfix_str(fix.tag), bar.update(1)))
