"""McNemar's test: are two runs' verdicts right equally often on the same items?

Only the discordant items count (one run right, the other wrong). Below `EXACT_BELOW` of them the test is the exact
two-sided binomial test of the split against one half; from there on, the chi-square approximation with Edwards'
continuity correction.
"""

from __future__ import annotations

from collections.abc import Sequence

from scipy.stats import binomtest, chi2

from schemas.compare import McNemarTest

EXACT_BELOW = 25


def mcnemar(right_a: Sequence[bool], right_b: Sequence[bool]) -> McNemarTest:
    """The test over aligned per-item outcomes (whether each run's verdict equals the label's class)."""
    only_a = sum(1 for a, b in zip(right_a, right_b, strict=True) if a and not b)
    only_b = sum(1 for a, b in zip(right_a, right_b, strict=True) if b and not a)
    discordant = only_a + only_b
    if discordant < EXACT_BELOW:
        p_value = 1.0 if discordant == 0 else binomtest(only_b, discordant, 0.5).pvalue
        return McNemarTest(
            n=len(right_a), only_a_right=only_a, only_b_right=only_b, method="exact binomial", p_value=min(1.0, p_value)
        )
    statistic = (abs(only_a - only_b) - 1) ** 2 / discordant
    return McNemarTest(
        n=len(right_a),
        only_a_right=only_a,
        only_b_right=only_b,
        method="chi-square with continuity correction",
        statistic=statistic,
        p_value=float(chi2.sf(statistic, 1)),
    )
