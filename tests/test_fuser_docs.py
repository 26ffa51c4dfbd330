"""docs/fusion.md: its Python examples run, in order, as one script (they check themselves against numpy)."""

import contextlib
import io
import re
import runpy
from pathlib import Path

DOC = Path(__file__).resolve().parent.parent / "docs" / "fusion.md"


def test_fusion_doc_examples_run(tmp_path):
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert len(blocks) >= 5
    script = tmp_path / "fusion_doc_examples.py"  # a file, so that kernels defined in it have a source
    script.write_text("\n".join(blocks))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        runpy.run_path(str(script), run_name="fusion_doc")
    text = out.getvalue()
    assert "graph block: 1 group(s) in 1 stage(s), one stacked launch" in text
    assert "split plan: a guarded row did not fit UB" in text and "recomputes: %6 sub" in text
    assert "w.shape[0] is 301 but it must equal x.shape[1] = 300" in text
    assert "['f_g0_exp', 'f_g1_custom_scale_rows', 'f_g2_max_sub_exp_sum_truediv']" in text
    # fresh found block's build (the same structure): five shapes, five encodes, no build of its own
    assert "GraphStats(captures=1, calls=5, launches=5, fallbacks=0, builds=0, loads=0, encodes=5, " in text
