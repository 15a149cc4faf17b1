"""Algorithm 1's hyper-parameters in one record, with the defaults every Birder entry point takes
(beta 0.95, the paper's setting in every experiment, Section 5.1; eps 1e-8; AMSGrad off)."""

from __future__ import annotations

from dataclasses import dataclass

from birder_ref.validation import check_coefficients


@dataclass(frozen=True)
class HyperParameters:
    """beta: the EMA coefficient of m and b_hat (lines 5-6); eps: added to b in line 8; T0: the step after which
    b = max(b, b_hat) (AMSGrad, line 7; None: never)."""

    beta: float = 0.95
    eps: float = 1e-8
    T0: int | None = None

    def __post_init__(self) -> None:
        check_coefficients(self.beta, self.eps, self.T0)


DEFAULTS = HyperParameters()
