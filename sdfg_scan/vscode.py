"""For DaCe's VS Code extension: list this file in the ``dace.optimization.customTransformationsPaths``
setting so that the extension's daemon imports sdfg_scan.

Importing it registers the ``sdfg_scan`` DaCe library (every node class and its expansions, so the
daemon's property editor knows ``CumulativeScan``, ``Scan``, ... by classpath) and the pattern
transformations (listed in the extension's transformation panel). The daemon loads the file by path
(``importlib.util.spec_from_file_location``), so sdfg_scan itself must be importable in the Python
interpreter the extension uses (``pip install -e .`` in that environment);
``python -c "import sdfg_scan.vscode as v; print(v.__file__)"`` prints the path to put in the setting.

See the README section "Looking at scans (viewer, VS Code)" for the settings, the extension's
version check that stops it from loading this file with dace 2.0.0a10, and why a file saved where
sdfg_scan is not importable loses its sdfg_scan nodes for good.
"""

import sdfg_scan
import sdfg_scan.transformations as transformations
from sdfg_scan.transformations import *  # noqa: F401,F403  (transformation classes visible to the daemon)

NODES = sorted(k for k, v in vars(sdfg_scan).items() if isinstance(v, type) and hasattr(v, "implementations"))
"""The node classes the daemon now knows."""

TRANSFORMATIONS = list(transformations.__all__)
"""The transformations the daemon now knows."""

__all__ = ["NODES", "TRANSFORMATIONS"]
