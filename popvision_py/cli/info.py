"""`popvision info PROFILE`: what a profile holds, read from its manifest and table footers."""

from __future__ import annotations

import json

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


def _render_text(facts: dict) -> str:
    target, run = facts["target"], facts["run"]
    generator = facts["generator"]
    lines = [
        f"Profile   {facts['path']}",
        f"Format    {facts['format']} v{facts['schema_version']}, written by "
        f"{generator.get('name', '?')} {generator.get('version', '')} on {facts['created']}",
        "",
        "Target",
    ]
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
