"""Does a sample follow an exact law? Pearson's chi-square test, and the total variation.

Cells whose expected count is below 5 are pooled into one (the chi-square approximation needs
about 5 per cell); cells of probability 0 must stay empty, else the law is plainly wrong and the
p-value is 0.
"""

from __future__ import annotations

import torch


def chi_square_pvalue(counts: torch.Tensor, probs: torch.Tensor, min_expected: float = 5.0) -> float:
    """P-value of Pearson's test of ``counts`` (any shape) against ``probs`` (same shape, sums to 1).

    Under the null, p is uniform on [0, 1]: a test at level a fails a correct sampler with
    probability a.
    """
    return chi_square_test(counts, probs, min_expected)[2]


def chi_square_test(counts: torch.Tensor, probs: torch.Tensor,
                    min_expected: float = 5.0) -> tuple[float, int, float]:
    """(statistic, degrees of freedom, p-value) of Pearson's test, cells pooled as above; a
    sample where the law puts no mass gives (inf, 0, 0.0)."""
    counts, probs = counts.double().flatten(), probs.double().flatten()
    if counts.shape != probs.shape:
        raise ValueError(f"counts {tuple(counts.shape)} and probs {tuple(probs.shape)} differ in size")
    if abs(float(probs.sum()) - 1) > 1e-6:
        raise ValueError(f"probs must sum to 1, got {float(probs.sum()):.6f}")
    if float(counts[probs == 0].sum()) > 0:
        return float("inf"), 0, 0.0  # a sample where the law puts no mass
    expected = probs * float(counts.sum())
    small = expected < min_expected
    o = torch.cat([counts[~small], counts[small].sum()[None]])
    e = torch.cat([expected[~small], expected[small].sum()[None]])
    o, e = o[e > 0], e[e > 0]
    if len(e) < 2:
        raise ValueError("too few samples: every cell was pooled into one")
    dof = len(e) - 1
    stat = float(((o - e) ** 2 / e).sum())
    return stat, dof, float(torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64),
                                                    torch.tensor(stat / 2, dtype=torch.float64)))


def total_variation(counts: torch.Tensor, probs: torch.Tensor) -> float:
    """Half the L1 distance between the sample's frequencies and ``probs`` (0 = identical)."""
    freq = counts.double() / counts.sum()
    return 0.5 * float((freq - probs.double()).abs().sum())
