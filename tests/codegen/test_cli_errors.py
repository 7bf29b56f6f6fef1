"""Issue 30, the transpiler's cases: an empty file, PTX that jaxptx.check
rejects, binary input and an output that cannot be written each end in one
clear line on stderr and a non-zero exit, never a traceback or a silent
kernel; a constant-expression address offset transpiles and traces back."""

from __future__ import annotations

import pytest

from jaxptx import emit, parse
from jaxptx.codegen import to_python
from jaxptx.codegen.__main__ import main

KERNEL = """.version 8.5
.target sm_80
.address_size 64

.visible .entry k(
\t.param .u64 k_param_0
)
{
\t.reg .b32 %r<3>;
\t.reg .b64 %rd<3>;
\tld.param.u64 %rd1, [k_param_0];
\tcvta.to.global.u64 %rd2, %rd1;
\tld.global.u32 %r1, [%rd2+(2*2)];
\tadd.u32 %r1, %r1, 1;
\tst.global.u32 [%rd2 + ( 1 << 3 )], %r1;
\tret;
}
"""


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


@pytest.mark.parametrize("text", ["", "\n\n", "// nothing here\n/* or here */\n"])
def test_an_empty_file_is_refused(tmp_path, capsys, text) -> None:
    src = tmp_path / "empty.ptx"
    src.write_text(text)
    status, out, err = _run(capsys, src)
    assert (status, out) == (1, "")
    assert err == (f"error: {src}: the module holds no PTX statements (empty, or only comments); "
                   "nothing to transpile\n")
    with pytest.raises(ValueError, match=r"the module holds no PTX statements"):
        to_python(parse(text))


def test_ptx_that_check_rejects_is_refused_unless_unchecked(tmp_path, capsys) -> None:
    src = tmp_path / "bad.ptx"
    src.write_text(KERNEL.replace("add.u32", "add.u33"))
    status, out, err = _run(capsys, src)
    assert (status, out) == (1, "")
    lines = err.splitlines()
    assert lines[0].startswith(f"error: {src}:14:2: add.u33: unknown modifier .u33 (did you mean .u32?)")
    assert lines[1] == (f"error: {src}: jaxptx.check found 1 error(s); fix the PTX, or pass "
                        "--unchecked to transpile it as a validate=False kernel")
    status, out, err = _run(capsys, src, "--unchecked")
    assert status == 0 and "validate=False" in out
    assert err.startswith(f"warning: {src}:14:2: add.u33: unknown modifier .u33")


def test_binary_input_is_refused(tmp_path, capsys) -> None:
    src = tmp_path / "k.cubin"
    src.write_bytes(b"\x7fELF\x02\x01\x01\x00\xff\xfe\x00")
    status, out, err = _run(capsys, src)
    assert (status, out) == (2, "")
    assert err == (f"error: cannot read {src}: not PTX text (byte 0xff at offset 8 is not UTF-8); "
                   "give the .ptx file, not a cubin or other binary\n")


def test_a_directory_as_input_is_refused(tmp_path, capsys) -> None:
    status, _, err = _run(capsys, tmp_path)
    assert status == 2 and err == f"error: cannot read {tmp_path}: Is a directory\n"


@pytest.mark.parametrize("where, reason", [
    ("", "Is a directory"),                       # the output names a directory
    ("file.txt/out.py", "Not a directory"),       # a path under a file cannot be created
    ("missing/out.py", "No such file or directory"),
])
def test_an_output_that_cannot_be_written_is_one_line(tmp_path, capsys, where, reason) -> None:
    src = tmp_path / "k.ptx"
    src.write_text(KERNEL)
    (tmp_path / "file.txt").write_text("")
    target = tmp_path / where if where else tmp_path
    status, out, err = _run(capsys, src, "-o", target)
    assert (status, out) == (2, "")
    assert err == f"error: cannot write {target}: {reason}\n"


def test_an_expression_offset_transpiles_and_traces_back(tmp_path, capsys) -> None:
    src = tmp_path / "k.ptx"
    src.write_text(KERNEL)
    dest = tmp_path / "k.py"
    status, _, err = _run(capsys, src, "-o", dest)
    assert status == 0 and err == ""
    source = dest.read_text()
    assert "ptx.addr(rd[2], ptx.imm('4'))" in source and "ptx.imm('8')" in source
    namespace: dict = {}
    exec(compile(source, str(dest), "exec"), namespace)
    assert namespace["k"].module() == parse(KERNEL)
    assert namespace["k"].ptx() == emit(parse(KERNEL), style="canonical")
    assert "[%rd2+4]" in namespace["k"].ptx()

