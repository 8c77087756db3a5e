"""How a simulated rider answers an offer: the chance to accept falls with what is offered.

As in FleetPy's traveller models, the chance is a piecewise-linear function of the offered
wait (pickup time minus now) and of the offered detour (planned ride over the direct drive):
``acceptance_probability`` up to a first threshold, falling linearly to 0 at a second one.
Both factors multiply. With ``acceptance_model`` "flat" the chance is
``acceptance_probability`` whatever the offer (the model before riders weighed offers).
"""

from __future__ import annotations

from .settings import SimulatorSettings


def _linear(value: float, full: float, zero: float) -> float:
    """1 up to ``full``, 0 from ``zero``, linear between."""
    if value <= full:
        return 1.0
    if value >= zero:
        return 0.0
    return (zero - value) / (zero - full)


def acceptance_probability(settings: SimulatorSettings, wait_s: float, detour: float) -> float:
    """The chance that a simulated rider accepts an offer of this wait and detour."""
    top = settings.acceptance_probability
    if settings.acceptance_model == "flat":
        return top
    return (top * _linear(wait_s, settings.acceptance_wait_full_s,
                          settings.acceptance_wait_zero_s)
            * _linear(detour, settings.acceptance_detour_full,
                      settings.acceptance_detour_zero))
