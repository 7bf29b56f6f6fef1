"""Running the GPU-checked ZLUDA vectors (../shared/golden/zluda) through the
emulator, following the launch convention of that folder's README."""

from __future__ import annotations

import json
import pathlib

import numpy as np

from jaxptx import sim

GOLDEN = pathlib.Path(__file__).resolve().parents[2].parent / "shared" / "golden" / "zluda"
_DTYPES = {"u8": np.uint8, "u16": np.uint16, "u32": np.uint32, "u64": np.uint64, "i16": np.int16,
           "i32": np.int32, "i64": np.int64, "f16": np.float16, "f32": np.float32, "f64": np.float64}
_BITS = {"f16": np.uint16, "f32": np.uint32, "f64": np.uint64}


def cases() -> list[dict]:
    """All cases, or an empty list when the golden folder is absent."""
    path = GOLDEN / "cases.json"
    return json.loads(path.read_text()) if path.exists() else []


def _array(spec: dict) -> np.ndarray:
    dtype = spec["dtype"]
    if dtype in _BITS:
        return np.array([int(v, 16) for v in spec["values"]], dtype=_BITS[dtype]).view(_DTYPES[dtype])
    return np.array([int(v) for v in spec["values"]], dtype=_DTYPES[dtype])


def run(case: dict) -> tuple[np.ndarray, np.ndarray]:
    """Run one case; returns (output, expected), both as raw bits."""
    text = (GOLDEN / case["ptx"]).read_text()
    expected = _array(case["output"])
    output = np.zeros_like(expected)
    buffers = {"output": output}
    if case["input"] is not None:
        buffers["input"] = _array(case["input"])
    args = [buffers[a] for a in case["args"]][:len(case["kernel_params"])]
    sim.launch(text, *args, kernel=case["kernel"], grid=tuple(case["grid"]), block=tuple(case["block"]),
               smem=case["dynamic_shared_bytes"])
    bits = np.dtype(f"u{expected.dtype.itemsize}")
    return output.view(bits), expected.view(bits)
