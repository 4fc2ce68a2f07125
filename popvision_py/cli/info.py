"""`popvision info PROFILE`: what a profile holds, read from its manifest and table footers."""

from __future__ import annotations

import json
import re
from pathlib import PurePath

import click

from popvision_py.format import open_profile_file


def describe(path: str) -> dict:
    """The facts `info` shows: target, run configuration, and each table's rows and bytes (the profile
    opened and checked as every command opens it, nothing decoded: no pyarrow)."""
    with open_profile_file(path) as profile:
        return {
            "path": str(profile.path),
            "format": profile.manifest["format"],
            "schema_version": profile.manifest["schema_version"],
            "generator": profile.manifest["generator"],
            "created": profile.manifest["created"],
            "target": profile.target,
            "run": profile.run,
            "tables": {
                name: {"rows": profile.num_rows(name), "bytes": profile.member_bytes(name)}
                for name in profile.tables
            },
        }


SHOWN_FILES = 4  # an import's trace files named one by one up to this many, else counted


def named_ranks(ranks: list[int]) -> str:
    """Ranks in a few words, whatever their count: ``ranks 0 to 1,023`` where they run on without a gap, else
    the first few and how many more."""
    plural = "s" if len(ranks) != 1 else ""
    if len(ranks) > 2 and ranks == list(range(ranks[0], ranks[0] + len(ranks))):
        return f"ranks {ranks[0]:,} to {ranks[-1]:,}"
    return f"rank{plural} {', '.join(map(str, ranks[:SHOWN_FILES]))}" + (
        f" and {len(ranks) - SHOWN_FILES:,} more" if len(ranks) > SHOWN_FILES else "")


def named_files(files: list[str]) -> str:
    """Trace files in a few words, whatever their count: each one up to ``SHOWN_FILES``; else, where they share
    a folder and a name's pattern (digits as ``<n>``), those and the first two names and the last, or the first
    two files and the last."""
    if len(files) <= SHOWN_FILES:
        return ", ".join(files)
    folders = {str(PurePath(f).parent) for f in files}
    patterns = {re.sub(r"\d+", "<n>", PurePath(f).name) for f in files}
    if len(folders) == 1 and len(patterns) == 1:
        names = [PurePath(f).name for f in (*files[:2], files[-1])]
        return f"{folders.pop()}/{patterns.pop()} ({names[0]}, {names[1]} ... {names[2]})"
    return f"{', '.join(files[:2])} ... {files[-1]}"


def _imported_lines(facts: dict) -> list[str]:
    """An imported profile's facts in a PyTorch user's words (the manifest's ``run.import``), not an IPU's."""
    target, run = facts["target"], facts["run"]
    facts_of = run.get("import") or {}
    files, ranks = list(facts_of.get("files") or []), list(facts_of.get("ranks") or [])
    world = facts_of.get("world_size")
    traced = named_ranks(ranks)
    of_world = f" of a world of {world:,}" if isinstance(world, int) and world > len(ranks) else ""
    named = named_files(files)
    stated = not any(str(x).startswith("the device's memory capacity") for x in facts_of.get("not_inferred") or [])
    memory = f"{target['bytes_per_tile'] / 2**20:,.1f} MiB a rank" if stated else "not stated by the traces"
    lines = ["", "Imported from PyTorch profiler traces",
             f"  {'traces':<22} {len(files):,} file{'s' if len(files) != 1 else ''}: {named}",
             f"  {'ranks traced':<22} {traced}{of_world}",
             f"  {'schedule':<22} {facts_of.get('schedule', '?')}",
             f"  {'device':<22} {target.get('arch', '?')}, memory {memory}",
             f"  {'torch version':<22} {facts_of.get('torch_version') or 'not recorded'}",
             f"  {'events read':<22} {facts_of.get('events', 0):,}",
             f"  {'micro-batches a step':<22} {run.get('gradient_accumulation')}",
             f"  {'profiler steps':<22} {run.get('device_iterations')}"]
    kernels = facts["tables"].get("kernels", {}).get("rows")
    if kernels is not None:
        lines.append(f"  {'GPU kernels':<22} {kernels:,}" + ("" if kernels else " (a CPU trace: no GPU timeline)"))
    for k, sentence in enumerate(facts_of.get("not_inferred") or []):
        lines.append(f"  {'not in the traces' if k == 0 else '':<22} - {sentence}")
    return lines


def _render_text(facts: dict) -> str:
    target, run = facts["target"], facts["run"]
    generator = facts["generator"]
    lines = [
        f"Profile   {facts['path']}",
        f"Format    {facts['format']} v{facts['schema_version']}, written by "
        f"{generator.get('name', '?')} {generator.get('version', '')} on {facts['created']}",
    ]
    if run.get("source") == "pytorch-profiler":
        lines += _imported_lines(facts)
    else:
        lines += ["", "Target"]
        lines += [f"  {key:<22} {value}" for key, value in target.items()]
        lines += ["", "Run configuration"]
        for key, value in run.items():
            shown = json.dumps(value) if isinstance(value, (list, dict)) else value
            lines.append(f"  {key:<22} {shown}")
    lines += ["", f"  {'table':<14} {'rows':>14} {'bytes':>14}"]
    for name, table in facts["tables"].items():
        lines.append(f"  {name:<14} {table['rows']:>14,} {table['bytes']:>14,}")
    return "\n".join(lines)


@click.command("info")
@click.argument("profile", type=click.Path(dir_okay=True))
@click.option("--json", "as_json", is_flag=True, help="Print the facts as JSON instead of text.")
def command(profile: str, as_json: bool) -> None:
    """Show what PROFILE holds: target, run configuration, and each table's rows and bytes."""
    facts = describe(profile)
    click.echo(json.dumps(facts, indent=2) if as_json else _render_text(facts))
