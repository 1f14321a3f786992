"""Tests for explainers.mesh.simulated (worlds, meshes, their teardown), the torchrun entry's
refusal outside torchrun, and the launcher's store of real runs."""

import pytest
import torch
import torch.distributed as dist
from torch.distributed._local_tensor import local_tensor_mode

from explainers.mesh.simulated import make_mesh, simulated_mesh, simulated_world


def _clean():
    return not dist.is_initialized() and local_tensor_mode() is None


def test_world_restores_state_after_normal_exit():
    with simulated_world(3) as mode:
        assert dist.is_initialized() and dist.get_world_size() == 3
        assert local_tensor_mode() is mode
        assert sorted(torch.zeros(1)._local_tensors) == [0, 1, 2]
    assert _clean()
    assert type(torch.zeros(1)) is torch.Tensor


def test_world_restores_state_after_exception():
    with pytest.raises(KeyError), simulated_world(2):
        raise KeyError("boom")
    assert _clean()
    # and a new one can be opened straight away
    with simulated_world(2):
        pass
    assert _clean()


def test_nested_world_refused_and_outer_still_closes():
    with simulated_world(2):
        with pytest.raises(RuntimeError, match="already initialized"), simulated_world(2):
            pass
        # the outer world is intact after the refusal
        assert dist.get_world_size() == 2 and local_tensor_mode() is not None
    assert _clean()


def test_nested_mesh_refused():
    with (
        simulated_mesh((2,), ("a",)),
        pytest.raises(RuntimeError, match="already initialized"),
        simulated_mesh((2,), ("b",)),
    ):
        pass
    assert _clean()


def test_refuses_over_existing_real_process_group(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/rdzv", rank=0, world_size=1)
    try:
        with pytest.raises(RuntimeError, match="'gloo'"), simulated_world(2):
            pass
        assert dist.is_initialized()  # ours, untouched
    finally:
        dist.destroy_process_group()
    assert _clean()


@pytest.mark.parametrize(
    ("shape", "names", "err", "match"),
    [
        ((2, 3), ("a", "b"), None, None),
        ((2, 2), ("a",), ValueError, "2 dims but 1 names"),
        ((2, 2), ("a", "a"), ValueError, "unique; repeated: a"),
        ((2, 0), ("a", "b"), ValueError, "at least 1"),
        ((), (), ValueError, "at least one dimension"),
        ((2.0, 2), ("a", "b"), TypeError, "tuple of ints"),
        ((2, 2), ("a", 3), TypeError, "non-empty strings"),
    ],
)
def test_mesh_argument_checks(shape, names, err, match):
    if err is None:
        with simulated_mesh(shape, names) as mesh:
            assert mesh.shape == shape and mesh.mesh_dim_names == names
    else:
        with pytest.raises(err, match=match), simulated_mesh(shape, names):
            pass
    assert _clean()


def test_mesh_product_must_match_world_size():
    with (
        pytest.raises(ValueError, match=r"\(2, 2\) has 4 ranks but the world size is 8"),
        simulated_mesh((2, 2), ("a", "b"), world_size=8),
    ):
        pass
    with simulated_world(8), pytest.raises(ValueError, match="world size is 8"):
        make_mesh((2, 2), ("a", "b"))
    assert _clean()


@pytest.mark.parametrize("bad", [0, -1, True, 2.0, "8"])
def test_world_size_checks(bad):
    with pytest.raises((TypeError, ValueError), match="world_size"), simulated_world(bad):
        pass
    assert _clean()


def test_make_mesh_needs_process_group():
    with pytest.raises(RuntimeError, match="needs an initialized process group"):
        make_mesh((2,), ("a",))


def test_mesh_run_refuses_outside_torchrun():
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parent.parent)
    out = subprocess.run(
        [sys.executable, "-m", "explainers.mesh.torchrun"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2 and "run me under torchrun" in out.stderr


def test_stored_runs_are_kept_per_torch_version(tmp_path, monkeypatch):
    """A run stored under one torch version is neither read nor removed under another."""
    import torch

    from explainers.mesh import launch as mesh_launch

    # Stored runs live under the one cache root, in mesh-runs/.
    monkeypatch.setenv("TORCH_EXPLAINERS_CACHE", str(tmp_path))
    monkeypatch.setattr(torch, "__version__", "2.14.1+cu130")
    old = mesh_launch._store("verbatim", 15, {"x": 1})
    assert old.parent == tmp_path / "mesh-runs"
    assert "torch2.14.1+cu130" in old.name and mesh_launch._stored("verbatim", 15) == {"x": 1}
    monkeypatch.setattr(torch, "__version__", "2.15.0+cu132")
    assert mesh_launch._stored("verbatim", 15) is None
    new = mesh_launch._store("verbatim", 15, {"x": 2})
    assert old.exists() and new != old and mesh_launch._stored("verbatim", 15) == {"x": 2}
    # A record whose content names another torch is not trusted, whatever its name.
    new.write_text(old.read_text())
    assert mesh_launch._stored("verbatim", 15) is None
