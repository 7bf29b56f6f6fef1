"""``pyptx.intrinsic`` (also ``ptx.intrinsic``)."""

from .ptx import intrinsic

__all__ = ["intrinsic"]
