"""PTX → Python: the generated @kernel traces back to the input (IR equal to
the parse, text equal to the canonical emission) for every corpus file, plain
and with --sugar; ptxas accepts the retraced text where it accepted the input."""

from __future__ import annotations

import csv
import pathlib
import subprocess
import sys

import pytest

from jaxptx import emit, parse
from jaxptx.codegen import to_python
from jaxptx.runtime import ptxas

CORPUS = pathlib.Path(__file__).resolve().parents[2].parent / "shared" / "corpus"


def _rows() -> list[dict[str, str]]:
    if not (CORPUS / "INDEX.tsv").exists():
        return []
    return list(csv.DictReader(open(CORPUS / "INDEX.tsv"), delimiter="\t"))


ROWS = _rows()
needs_corpus = pytest.mark.skipif(not ROWS, reason=f"PTX corpus not found at {CORPUS} (../shared/corpus)")


def retrace(text: str, sugar: bool) -> tuple[object, str, str]:
    module = parse(text)
    source = to_python(module, "k", sugar=sugar)
    namespace: dict = {}
    exec(compile(source, "<transpiled>", "exec"), namespace)
    return module, source, namespace["k"]


@needs_corpus
@pytest.mark.parametrize("sugar", [False, True], ids=["plain", "sugar"])
@pytest.mark.parametrize("row", ROWS, ids=lambda r: r["path"])
def test_transpiled_kernel_traces_back(row, sugar) -> None:
    module, _, kernel = retrace((CORPUS / row["path"]).read_text(), sugar)
    traced = kernel.module()
    assert traced == module
    assert kernel.ptx() == emit(module, style="canonical")


def _arch(target: str) -> str:
    sm = target.split(",")[0].strip()
    return sm if int("".join(c for c in sm[3:] if c.isdigit())) >= 75 else "sm_75"


ACCEPTED = [r for r in ROWS if r["ptxas_ok"] == "yes"]


@needs_corpus
@pytest.mark.parametrize("row", ACCEPTED[::8], ids=lambda r: r["path"])
def test_ptxas_accepts_retraced_text(row) -> None:
    _, _, kernel = retrace((CORPUS / row["path"]).read_text(), sugar=True)
    ptxas(kernel.ptx(), _arch(row["target"]))


@needs_corpus
@pytest.mark.slow
@pytest.mark.parametrize("row", ACCEPTED, ids=lambda r: r["path"])
def test_ptxas_accepts_retraced_text_all(row) -> None:
    _, _, kernel = retrace((CORPUS / row["path"]).read_text(), sugar=True)
    ptxas(kernel.ptx(), _arch(row["target"]))


KERNEL = """.version 8.5
.target sm_80
.address_size 64

.visible .entry scale(
	.param .u64 scale_param_0,
	.param .u32 scale_param_1
)
{
	.reg .pred %p<3>;
	.reg .b32 %r<4>;
	.reg .b64 %rd<4>;
	ld.param.u64 %rd1, [scale_param_0];
	ld.param.u32 %r1, [scale_param_1];
	mov.u32 %r2, %tid.x;
	setp.ge.u32 %p1, %r2, %r1;
	@%p1 bra $L__BB0_3;
	cvta.to.global.u64 %rd2, %rd1;
$L__BB0_2:
	add.u32 %r2, %r2, 128;
	setp.lt.u32 %p2, %r2, %r1;
	@%p2 bra $L__BB0_2;
$L__BB0_3:
	ret;
}
"""


def test_sugar_reads_like_structured_code() -> None:
    module, source, kernel = retrace(KERNEL, sugar=True)
    assert "with ptx.if_(~p[1], label='$L__BB0_3'):" in source
    assert "with ptx.loop(label='$L__BB0_2') as loop:" in source
    assert "loop.again(pred=p[2])" in source
    assert "param_0 = ptx.decl('param', 'u64', 'scale_param_0')" in source
    assert "ptx.ld.param.u64(rd[1], ptx.addr(param_0))" in source
    assert kernel.module() == module


def test_plain_output_and_cli(tmp_path) -> None:
    src = tmp_path / "scale.ptx"
    src.write_text(KERNEL)
    out = tmp_path / "scale_kernel.py"
    subprocess.run([sys.executable, "-m", "jaxptx.codegen", str(src), "--name", "my_scale", "-o", str(out)],
                   check=True)
    text = out.read_text()
    assert "def my_scale():" in text and "@kernel(arch='sm_80', version=(8, 5), module=True" in text
    assert "@%p1" not in text and "pred=p[1]" in text
    namespace: dict = {}
    exec(compile(text, str(out), "exec"), namespace)
    assert namespace["my_scale"].ptx() == emit(parse(KERNEL), style="canonical")
    printed = subprocess.run([sys.executable, "-m", "jaxptx.codegen", str(src), "--sugar"],
                             check=True, capture_output=True, text=True).stdout
    assert "def scale():" in printed and "with ptx.loop" in printed


def test_cli_errors(tmp_path) -> None:
    missing = subprocess.run([sys.executable, "-m", "jaxptx.codegen", str(tmp_path / "nope.ptx")],
                             capture_output=True, text=True)
    assert missing.returncode == 2 and "cannot read" in missing.stderr
    bad = tmp_path / "bad.ptx"
    bad.write_text(".version 8.5\n#\n")
    broken = subprocess.run([sys.executable, "-m", "jaxptx.codegen", str(bad)], capture_output=True, text=True)
    assert broken.returncode == 1 and "bad.ptx:2:1: unexpected character '#'" in broken.stderr


def test_invalid_ptx_transpiles_unchecked() -> None:
    text = KERNEL.replace("add.u32 %r2, %r2, 128;", "add.u33 %r2, %r2, 128;")
    module, source, kernel = retrace(text, sugar=False)
    assert "validate=False" in source and "jaxptx.check reports errors" in source
    assert kernel.module() == module
