"""The Triton tests: skipped without Triton (``pip install -e '.[triton]'``)."""

from __future__ import annotations

import os

# Triton 3.9 warns once when this is unset; 1 keeps its default (FP fusion on).
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
