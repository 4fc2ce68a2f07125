"""`popvision info PROFILE`: what a profile holds, read from its manifest and table footers."""

from __future__ import annotations

import json

import click

from popvision_py.format import open_profile_file
from popvision_py.render.names import files_named, ranks_named


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




def _imported_lines(facts: dict) -> list[str]:
    """An imported profile's facts in a PyTorch user's words (the manifest's ``run.import``), not an IPU's."""
    target, run = facts["target"], facts["run"]
    facts_of = run.get("import") or {}
    files, ranks = list(facts_of.get("files") or []), list(facts_of.get("ranks") or [])
    world = facts_of.get("world_size")
    traced = ranks_named(ranks)
    of_world = f" of a world of {world:,}" if isinstance(world, int) and world > len(ranks) else ""
    named = files_named(files)
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
