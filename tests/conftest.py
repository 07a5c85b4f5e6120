"""Shared pytest fixtures and markers.

- `smollm2_dir`, `qwen3_dir`: the bundled offline model folders, prepared once in the cache
  (`MINISGL_CACHE_DIR`, default ~/.cache/minisgl); the first run converts SmolLM2 (~30 s).
- `@pytest.mark.gpu`: the test needs CUDA and is skipped when no GPU is present.
"""

from __future__ import annotations

from pathlib import Path

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if not gpu_items:
        return
    import torch  # only when a GPU test was collected: importing torch costs seconds

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in gpu_items:
        item.add_marker(skip)


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    from minisgl.utils.offline import prepare_smollm2

    return prepare_smollm2()


@pytest.fixture(scope="session")
def qwen3_dir() -> Path:
    from minisgl.utils.offline import prepare_qwen3

    return prepare_qwen3()
