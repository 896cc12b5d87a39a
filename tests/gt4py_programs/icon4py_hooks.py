"""icon4py's own graupel hooks as a mapping for ``sdfg-scan export --hooks`` (the ``opt_hooks`` fixture form),
set the way ``driver/run_graupel_only.py`` sets them. Needs icon4py's muphys package in the gt4py venv."""

from __future__ import annotations


def graupel_hooks() -> dict:
    from gt4py.next.program_processors.runners.dace.transformations import GT4PyAutoOptHook as Hook
    from icon4py.model.atmosphere.subgrid_scale_physics.muphys.implementations import graupel_dace_hooks as h

    return {Hook.TopLevelDataFlowPre: h.remove_self_copy_inside_scan,
            Hook.TopLevelDataFlowPost: h.rename_intermediate_access_nodes}
