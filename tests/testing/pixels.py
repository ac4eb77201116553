"""Images for the tests that compare heterodl's operations with
torchvision's (NumPy; the venv's Python)."""

import numpy


def coordinates(width, height):
    """Every pixel says where it is: (x, y, x ^ y) mod 256, uint8 [H, W, 3]."""
    y, x = numpy.mgrid[0:height, 0:width]
    return numpy.stack([x, y, x ^ y], axis=-1).astype(numpy.uint8)
