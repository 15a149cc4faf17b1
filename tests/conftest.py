"""Test settings shared by the whole suite: Hypothesis is derandomized (no test may fail by chance); one fixture
for the torch tests that need a process group of one rank in this process."""

import os
import tempfile
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "project",
    derandomize=True,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("project")


@pytest.fixture
def one_rank():
    """A gloo process group of one rank (rank 0, world size 1) in this process, destroyed afterwards."""
    import torch.distributed as dist  # here, so tests without torch do not import it

    with tempfile.TemporaryDirectory() as tmp:
        dist.init_process_group("gloo", init_method=f"file://{os.path.join(tmp, 'store')}", rank=0, world_size=1,
                                timeout=timedelta(seconds=30))
        try:
            yield
        finally:
            dist.destroy_process_group()
