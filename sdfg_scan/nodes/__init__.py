"""sdfg_scan library nodes, one module each. Importing a module registers its node and expansions."""


# one import line per node (append-only)
from sdfg_scan.nodes.associative_scan import AssociativeScan  # noqa: F401
from sdfg_scan.nodes.column_reduce import ColumnReduce  # noqa: F401
from sdfg_scan.nodes.cumulative_scan import CumulativeScan  # noqa: F401
from sdfg_scan.nodes.linear_recurrence import LinearRecurrence  # noqa: F401
from sdfg_scan.nodes.scan import Scan  # noqa: F401
from sdfg_scan.nodes.tridiagonal_solve import TridiagonalFactor, TridiagonalSolve  # noqa: F401
from sdfg_scan.nodes.window_reduce import WindowReduce  # noqa: F401
