"""sdfg_scan: DaCe library nodes, expansions and transformations for column (vertical) algorithms.

Importing the package registers the ``sdfg_scan`` DaCe library (every node and its expansions) and
the frontend lowerings (``sdfg_scan.cumsum(...)``, ``np.cumsum(...)`` inside ``@dace.program``).
"""

from dace.library import register_library

from sdfg_scan import nodes as _nodes
from sdfg_scan import reference  # noqa: F401
from sdfg_scan.nodes import *  # noqa: F401,F403  (node classes must be attributes of this module)

# the node classes (not their modules) become package attributes: register_library finds them here
globals().update({k: v for k, v in vars(_nodes).items() if isinstance(v, type) and not k.startswith("_")
                  and k not in ("ColumnNode", "AutoExpansion")})

from sdfg_scan.associative import associative_scan  # noqa: E402,F401
from sdfg_scan.autotune import autotune  # noqa: E402,F401
from sdfg_scan.frontend import *  # noqa: E402,F401,F403
from sdfg_scan.pipeline import optimize  # noqa: E402,F401
from sdfg_scan.select import compile_flags, exact_cuda_flags, select_expansions  # noqa: E402,F401

register_library(__name__, "sdfg_scan")

from sdfg_scan import dace_fixes as _dace_fixes  # noqa: E402

_dace_fixes.install()

__version__ = "0.1.0"
