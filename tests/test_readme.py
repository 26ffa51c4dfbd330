"""The README's quickstart and .ci/run stay in step, and the README's example runs."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _bash_blocks(text: str) -> list[str]:
    return [b.strip() for b in re.findall(r"```bash\n(.*?)```", text, re.S)]


def test_quickstart_has_two_commands_and_ci_runs_the_second():
    blocks = _bash_blocks((ROOT / "README.md").read_text())
    assert len(blocks) == 2, "the quickstart has exactly two commands"
    assert "gallery --trace" in blocks[0]
    ci = (ROOT / ".ci" / "run").read_text()
    assert blocks[1] in ci.splitlines(), ".ci/run must run the README's test command exactly as written"


def test_readme_python_example_runs():
    text = (ROOT / "README.md").read_text()
    code = re.findall(r"```python\n(.*?)```", text, re.S)[0]
    path = ROOT / "tests" / "_readme_example.py"
    path.write_text(code)
    try:
        r = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=120)
    finally:
        path.unlink()
    assert r.returncode == 0, r.stderr
