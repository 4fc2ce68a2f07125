"""`popvision models`: the model zoo, each model's parameters, defaults and default partition."""

from __future__ import annotations

import json

import click


def describe_zoo() -> list[dict]:
    """One record per zoo model: parameters, option defaults, presets and the default partition."""
    from engine.runner import RunRequest, load_model_source, build_options
    from engine.zoo import ZOO, describe_partition, estimate_ipus

    records = []
    for entry in ZOO.values():
        options = build_options(load_model_source(entry.name), RunRequest(entry.name))
        model = entry.build(options, **entry.resolve_params({}))
        layout = model.default_layout
        records.append({
            "name": entry.name,
            "description": entry.description,
            "parameters": dict(entry.params),
            "presets": list(entry.presets),
            "defaults": dict(entry.defaults),
            "strategy": layout.kind if layout else "pipelined",
            "ipus": estimate_ipus(layout) if layout else 1,
            "partition": describe_partition(layout) if layout else "",
            "blocks": list(model.blocks),
            "trainable_parameters": model.parameters,
        })
    return records


def _render_text(records: list[dict]) -> str:
    lines = []
    for r in records:
        params = ", ".join(f"{k}={v}" for k, v in r["parameters"].items()) or "none"
        defaults = ", ".join(f"{k}={v}" for k, v in r["defaults"].items())
        lines += [
            f"{r['name']}",
            f"  {r['description']}",
            f"  parameters   {params}",
            f"  defaults     {defaults}",
            f"  partition    {r['strategy']} over {r['ipus']} IPU(s): {r['partition']}",
            f"  weights      {r['trainable_parameters']:,} trainable parameters",
        ]
        if r["presets"]:
            lines.append(f"  presets      {', '.join(r['presets'])}")
        lines.append("")
    lines.append('Run one with `popvision run NAME`; regroup blocks with --stages "B1,B2@0 B3@1" (A..B is every block '
                 'from A to B, so a partition above can be passed to --stages as printed).')
    return "\n".join(lines)


@click.command("models")
@click.option("--json", "as_json", is_flag=True, help="Print the zoo as JSON.")
def command(as_json: bool) -> None:
    """List the model zoo with parameters, defaults and default partition over IPUs."""
    records = describe_zoo()
    click.echo(json.dumps(records, indent=2) if as_json else _render_text(records))
