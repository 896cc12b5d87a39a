"""The README's example runs as written."""

import re
import runpy
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_example_runs(tmp_path):
    text = README.read_text()
    section = text[text.index("## A short example"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    script = tmp_path / "readme_example.py"  # a real file: the DaCe frontend reads the program's source
    script.write_text(code)
    runpy.run_path(str(script), run_name="readme_example")
