"""sdfg_scan's pattern transformations (imported as ``sdfg_scan.transformations``), one per file."""

__all__: list[str] = []

from sdfg_scan.transformations.lift_scans import LiftScans  # noqa: E402,F401

__all__.append("LiftScans")

from sdfg_scan.transformations.remove_scan_self_copies import RemoveScanSelfCopies  # noqa: E402,F401

__all__.append("RemoveScanSelfCopies")

from sdfg_scan.transformations.peel_boundary_levels import PeelBoundaryLevels  # noqa: E402,F401

__all__.append("PeelBoundaryLevels")

from sdfg_scan.transformations.dead_carry_elimination import DeadCarryElimination  # noqa: E402,F401

__all__.append("DeadCarryElimination")

from sdfg_scan.transformations.scan_fusion import ScanFusion  # noqa: E402,F401

__all__.append("ScanFusion")

from sdfg_scan.transformations.scan_fission import ScanFission  # noqa: E402,F401

__all__.append("ScanFission")

from sdfg_scan.transformations.scan_outputs_in_place import ScanOutputsInPlace  # noqa: E402,F401

__all__.append("ScanOutputsInPlace")

from sdfg_scan.transformations.scan_to_cumulative import ScanToCumulative  # noqa: E402,F401

__all__.append("ScanToCumulative")


from sdfg_scan.transformations.scan_loop_interchange import ScanLoopInterchange  # noqa: E402,F401

__all__.append("ScanLoopInterchange")

from sdfg_scan.transformations.scan_pair_to_tridiagonal import ScanPairToTridiagonal  # noqa: E402,F401
from sdfg_scan.transformations.scan_to_tridiagonal_factor import ScanToTridiagonalFactor  # noqa: E402,F401

__all__ += ["ScanPairToTridiagonal", "ScanToTridiagonalFactor"]

from sdfg_scan.transformations.lift_cell_map import LiftCellMap  # noqa: E402,F401

__all__.append("LiftCellMap")

from sdfg_scan.transformations.vectorize_cell_map import VectorizeCellMap  # noqa: E402,F401

__all__.append("VectorizeCellMap")

from sdfg_scan.transformations.result_write_through import ResultWriteThrough  # noqa: E402,F401

__all__.append("ResultWriteThrough")

from sdfg_scan.transformations.copy_in_layout_order import CopyInLayoutOrder  # noqa: E402,F401

__all__.append("CopyInLayoutOrder")

from sdfg_scan.transformations.fold_constant_conditions import FoldConstantConditions  # noqa: E402,F401

__all__.append("FoldConstantConditions")

from sdfg_scan.transformations.copy_tasklet_to_copy import CopyTaskletToCopy  # noqa: E402,F401

__all__.append("CopyTaskletToCopy")


def _apply_without_stack_lineinfo() -> None:
    """Every transformation's ``apply`` runs with DaCe's per-node stack walk off (:mod:`sdfg_scan.lineinfo`):
    the nodes it adds would only name lines of sdfg_scan's source. Idempotent."""
    from sdfg_scan.lineinfo import no_stack_lineinfo

    for name in __all__:
        cls = globals()[name]
        if "apply" in vars(cls) and not getattr(cls.apply, "_sdfg_scan_no_lineinfo", False):
            wrapped = no_stack_lineinfo()(cls.apply)
            wrapped._sdfg_scan_no_lineinfo = True  # type: ignore[attr-defined]
            cls.apply = wrapped


_apply_without_stack_lineinfo()
