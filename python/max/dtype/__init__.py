"""Element types of tensors (``max.dtype``)."""

from max.dtype.dtype import DType
from max.dtype.finfo import finfo

__all__ = ["DType", "finfo"]
