"""Test settings shared by the whole suite: Hypothesis is derandomized (no test may fail by chance)."""

from hypothesis import HealthCheck, settings

settings.register_profile(
    "project",
    derandomize=True,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("project")
