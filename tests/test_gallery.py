"""`dvmlang gallery` runs every example, checks it, and exits non-zero when one is wrong."""

from pathlib import Path

from dvmlang.cli import main

ROOT = Path(__file__).resolve().parent.parent


def test_gallery_passes(capsys):
    assert main(["gallery", "--dir", str(ROOT / "examples")]) == 0
    out = capsys.readouterr().out
    assert "vector_add" in out and "softmax" in out and "simulated" in out


def test_gallery_fails_on_a_wrong_example(tmp_path, capsys):
    (tmp_path / "wrong.py").write_text(
        "import numpy as np\n"
        "def run():\n"
        "    assert np.allclose(np.ones(3), np.zeros(3)), 'deliberately wrong'\n")
    assert main(["gallery", "--dir", str(tmp_path)]) == 1
    assert "FAILED wrong" in capsys.readouterr().out
