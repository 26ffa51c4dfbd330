"""`dvmlang gallery` runs every example, checks it, and exits non-zero when one is wrong; its Triton section
runs the tutorials of examples/triton/ (each checked against torch), skipped when torch is missing."""

from pathlib import Path

import pytest

from dvmlang import cli
from dvmlang.cli import main

ROOT = Path(__file__).resolve().parent.parent


def test_gallery_passes(capsys):
    assert main(["gallery", "--no-triton", "--no-multi-npu", "--dir", str(ROOT / "examples")]) == 0  # the rest: below
    out = capsys.readouterr().out
    assert "vector_add" in out and "softmax" in out and "simulated" in out
    assert "Triton tutorials" not in out


def test_gallery_runs_the_triton_tutorials(capsys):
    pytest.importorskip("torch")
    assert main(["gallery", "--dir", str(ROOT / "examples"), "--only", "triton/07", "triton/11"]) == 0
    out = capsys.readouterr().out
    assert "Triton tutorials" in out and "07_extern_functions" in out and "11_programmatic" in out
    assert "The maximum difference" not in out  # a tutorial's own output is hidden without -v
    assert "vector_add " not in out


def test_gallery_runs_the_multi_npu_section(capsys):
    assert main(["gallery", "--no-triton", "--dir", str(ROOT / "examples"), "--only", "multi-npu/collectives",
                 "multi-npu/matmul_reduce_scatter", "--trace", "--view", "comm"]) == 0
    out = capsys.readouterr().out
    assert "multi-npu (many" in out and "collectives" in out and "matmul_reduce_scatter" in out
    assert "all_reduce" in out and "HCCS 0 -> 1" in out and "vector_add" not in out  # the comm view of each


def test_gallery_fails_on_a_wrong_example(tmp_path, capsys):
    (tmp_path / "wrong.py").write_text(
        "import numpy as np\n"
        "def run():\n"
        "    assert np.allclose(np.ones(3), np.zeros(3)), 'deliberately wrong'\n")
    assert main(["gallery", "--dir", str(tmp_path)]) == 1
    assert "FAILED wrong" in capsys.readouterr().out


def test_a_tutorial_without_its_module_is_skipped_not_failed(tmp_path, capsys, monkeypatch):
    (tmp_path / "ok.py").write_text("def run():\n    pass\n")
    (tmp_path / "triton").mkdir()
    (tmp_path / "triton" / "01_needs.py").write_text("import no_such_module_for_dvmlang\ndef run():\n    pass\n")
    (tmp_path / "triton" / "02_wrong.py").write_text("def run():\n    assert False, 'deliberately wrong'\n")
    monkeypatch.setattr(cli, "OPTIONAL_NEEDS", (*cli.OPTIONAL_NEEDS, "no_such_module_for_dvmlang"))
    assert main(["gallery", "--dir", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "skipped triton/01_needs: needs no_such_module_for_dvmlang" in out
    assert "FAILED triton/02_wrong" in out and "FAILED triton/01" not in out
    assert main(["gallery", "--dir", str(tmp_path), "--only", "triton/01"]) == 0


def test_an_example_without_an_optional_extra_is_skipped_not_failed(tmp_path, capsys, monkeypatch):
    """The README's main command installs dvmlang without torch: the torch examples are skipped there."""
    (tmp_path / "ok.py").write_text("def run():\n    pass\n")
    (tmp_path / "torch_thing.py").write_text("import no_such_module_for_dvmlang\ndef run():\n    pass\n")
    (tmp_path / "other.py").write_text("import another_missing_module_for_dvmlang\ndef run():\n    pass\n")
    monkeypatch.setattr(cli, "OPTIONAL_NEEDS", (*cli.OPTIONAL_NEEDS, "no_such_module_for_dvmlang"))
    assert main(["gallery", "--dir", str(tmp_path), "--only", "ok", "torch_thing"]) == 0
    assert "skipped torch_thing: needs no_such_module_for_dvmlang" in capsys.readouterr().out
    assert main(["gallery", "--dir", str(tmp_path)]) == 1  # a module that is no optional extra is a failure
    assert "FAILED other" in capsys.readouterr().out
