"""``espresso-export models``: the alias table and supported architectures."""

from __future__ import annotations

from espresso_export.cli.app import app
from espresso_export.cli.common_options import JsonOpt


@app.command()
def models(json_out: JsonOpt = False) -> None:
    """List model aliases (usable wherever a model is expected) and supported architectures."""
    from espresso_export.cli.tables import model_tables, show
    from espresso_export.model.architectures import ARCHITECTURES
    from espresso_export.core.console import out_console
    from espresso_export.model.aliases import ALIASES, packaged_path
    from espresso_export.cli.render import print_json

    if json_out:
        print_json({
            "aliases": [{"alias": a.name, "hub_id": a.hub_id, "note": a.note,
                         "packaged": packaged_path(a.hub_id) is not None} for a in ALIASES],
            "architectures": [{"family": a.family, "model_types": list(a.model_types)} for a in ARCHITECTURES],
        })
        return
    show(*model_tables([(a.name, a.hub_id, a.note, packaged_path(a.hub_id) is not None) for a in ALIASES],
                       [(a.family, ", ".join(a.model_types)) for a in ARCHITECTURES], out_console().width))
