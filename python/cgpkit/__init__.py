"""cgpkit: location analytics under local geo-privacy, from Python.

The same C++ engine as cgp-sim: simulated fleets and the queries of Liang & Yi (range counts,
Gaussian KDE, kNN, threshold) by iterative elimination, accuracy-first queries, a device with
its own privacy filter, privacy arithmetic and selection accountants,
geometry, and the experiments as pandas frames (cgpkit.experiments).
"""
from ._errors import Error
from ._cgpkit import (  # noqa: F401
    __version__,
    Device,
    Region,
    SimulatedFleet,
    ball,
    box,
    cgp_rho_from_pure_gp,
    device_charge,
    gaussian_at_alert_epsilon,
    gaussian_delta,
    gaussian_epsilon,
    gaussian_rnm_epsilon,
    gaussian_selection_epsilon,
    gp_epsilon_from_cgp,
    polygon,
    project,
    signed_distance,
    split_budget,
)
from . import experiments  # noqa: F401

__all__ = [
    "Error", "Region", "SimulatedFleet", "Device", "ball", "box", "polygon", "signed_distance", "project",
    "split_budget",
    "device_charge", "cgp_rho_from_pure_gp", "gp_epsilon_from_cgp", "gaussian_delta",
    "gaussian_epsilon", "gaussian_rnm_epsilon", "gaussian_at_alert_epsilon",
    "gaussian_selection_epsilon", "experiments",
]
