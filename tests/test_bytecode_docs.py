"""docs/isa.md and the generated blocks of docs/bytecode.md are derived from the code and kept current."""

from __future__ import annotations

import re
import shutil

import dvmlang
from dvmlang.vm import container as C
from dvmlang.vm import docgen, isa


def test_checked_in_docs_are_up_to_date():
    assert docgen.main(["--check"]) == 0, "docs are stale: run python -m dvmlang.vm.docgen"


def test_the_check_notices_a_stale_block(tmp_path):
    shutil.copy(docgen.DOCS / "bytecode.md", tmp_path / "bytecode.md")
    text = (tmp_path / "bytecode.md").read_text()
    stale = text.replace("| `0x0001` | END | SCALAR | 1 | - | - |", "| `0x0001` | STOP | SCALAR | 1 | - | - |")
    assert stale != text
    (tmp_path / "bytecode.md").write_text(stale)
    fresh = docgen.outputs(tmp_path)[tmp_path / "bytecode.md"]
    assert fresh == text  # regenerating restores exactly the checked-in text


def test_isa_doc_has_one_entry_per_instruction():
    text = docgen.render_isa()
    headings = re.findall(r"^### (\S+)$", text, re.M)
    assert headings == [ins.name for ins in isa.TABLE]
    for ins in isa.TABLE:
        assert f"opcode `{ins.opcode:#06x}`, pipe {isa.PIPE_NAMES[ins.pipe]}" in text
        assert ins.doc in text


def test_bytecode_doc_tables_come_from_the_code():
    text = (docgen.DOCS / "bytecode.md").read_text()
    for ins in isa.TABLE:
        assert f"| `{ins.opcode:#06x}` | {ins.name} |" in text
    for name, sid in C.SECTION_IDS.items():
        assert f"| {sid} | `{name}` |" in text
    for f in C.Limits.__dataclass_fields__:
        assert f"`{f}`" in text


def test_the_documented_example_is_a_valid_file():
    data = docgen.example_container()
    bc = dvmlang.Bytecode.from_bytes(data)
    assert bc.serialise() == data and bc.name == "k" and bc.params == []
    assert dvmlang.run(bc).cycles > 0
    dump = "\n".join(docgen.example_dump())
    assert f"The smallest valid file, {len(data)} bytes" in dump


def test_unknown_block_names_are_refused():
    import pytest
    with pytest.raises(KeyError, match="unknown generated block"):
        docgen.fill_blocks("<!-- generated: nonsense -->\n<!-- end generated -->")
