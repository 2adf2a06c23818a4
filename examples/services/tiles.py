"""Python routines served by gridwise (see tiles.toml)."""

import numpy as np


def spd_tile(nb, bi, bj, nt):
    """Tile (bi, bj) of the n x n matrix (n = nb * nt) with 2n on the diagonal and
    0.5 + ((i + j) (|i - j| + 1) mod 97) / 97 elsewhere: symmetric, and strictly diagonally
    dominant, so positive definite."""
    n = nb * nt
    i = np.arange(bi * nb, (bi + 1) * nb)[:, None]
    j = np.arange(bj * nb, (bj + 1) * nb)[None, :]
    a = 0.5 + (((i + j) * (np.abs(i - j) + 1)) % 97) / 97.0
    return np.where(i == j, 2.0 * n, a)


def norm2(n, x):
    norm = float(np.linalg.norm(x))
    return norm, x / norm
