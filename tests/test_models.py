"""Any torchvision model by name, and the user's own model through the documented contract.

Everything runs on CPU at a few dozen pixels; large models are checked on the meta device."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torchvision

from bench.config import ConfigError
from bench.workloads import models, usermodel
from bench.workloads.modelspec import check_spec

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "my_model.py"


@pytest.fixture
def no_downloads(monkeypatch, tmp_path):
    """Any attempt to fetch weights fails the test, and the torch cache folder must stay empty."""
    def refuse(*args, **kwargs):
        raise AssertionError(f"a download was attempted: {args}")
    for target in (torch.hub, torchvision.models._api):
        monkeypatch.setattr(target, "load_state_dict_from_url", refuse, raising=False)
    monkeypatch.setattr(torch.hub, "download_url_to_file", refuse)
    home = tmp_path / "torch_home"
    home.mkdir()
    monkeypatch.setenv("TORCH_HOME", str(home))
    yield home
    assert list(home.iterdir()) == []


@pytest.mark.no_process
def test_resnet18_builds_with_random_weights_without_downloading_and_trains_one_step(no_downloads):
    spec = models.build_registry("resnet18", image_size=32)
    assert spec.task == "classification" and spec.image_size == 32 and spec.min_batch_per_replica == 2
    details = check_spec(spec, "resnet18")
    assert details["parameters"] == 11_689_512 and details["input_shape"] == [3, 32, 32]
    assert torch.isfinite(torch.tensor(details["dry_run_loss"]))


def test_make_batch_is_deterministic_per_seeded_generator_with_samples_along_dim0():
    spec = models.build_registry("squeezenet1_1", image_size=17, num_classes=5)
    x1, y1 = spec.make_batch(torch.Generator().manual_seed(3), 4)
    x2, y2 = spec.make_batch(torch.Generator().manual_seed(3), 4)
    x3, _ = spec.make_batch(torch.Generator().manual_seed(4), 4)
    assert torch.equal(x1, x2) and torch.equal(y1, y2) and not torch.equal(x1, x3)
    assert x1.shape == (4, 3, 17, 17) and y1.shape == (4,) and int(y1.max()) < 5
    assert spec.model(x1).shape == (4, 5)


def test_natural_size_comes_from_torchvisions_published_weights():
    assert models.build_registry("resnet50", meta=True).image_size == 224
    assert models.natural_size("inception_v3") == 299
    assert models.natural_size("efficientnet_b7") == 600
    assert models.natural_size("fcn_resnet50") == models.SEGMENTATION_SIZE


def test_segmentation_dict_output_and_per_pixel_targets_are_handled_by_loss_fn():
    spec = models.build_registry("lraspp_mobilenet_v3_large", image_size=32)
    x, y = spec.make_batch(torch.Generator().manual_seed(0), 2)
    assert y.shape == (2, 32, 32)
    out = spec.model.train()(x)
    assert isinstance(out, dict) and out["out"].shape == (2, 21, 32, 32)
    loss = spec.loss_fn(out, y)
    assert loss.dim() == 0 and torch.isfinite(loss)
    assert spec.task == "segmentation" and spec.min_batch_per_replica == 2


@pytest.mark.no_process
def test_googlenet_auxiliary_logits_in_train_mode_add_to_the_loss():
    spec = models.build_registry("googlenet", image_size=32, num_classes=3)
    x, y = spec.make_batch(torch.Generator().manual_seed(0), 2)
    out = spec.model.train()(x)
    assert isinstance(out, tuple) and len(out) == 3
    main = torch.nn.functional.cross_entropy(out[0], y)
    assert spec.loss_fn(out, y) > main  # the auxiliary classifiers contribute
    check_spec(spec, "googlenet")  # and every parameter, auxiliary heads included, gets a gradient


@pytest.mark.no_process
def test_vit_takes_any_multiple_of_its_patch_and_refuses_other_sizes_naming_what_it_accepts():
    details = models.validate_workload("vit_b_16", 48)
    assert details["image_size"] == 48 and details["input_shape"] == [3, 48, 48]
    with pytest.raises(ConfigError, match=r"vit_b_16 cannot take 40 px; it accepts a multiple of 16 from 16"):
        models.validate_workload("vit_b_16", 40)


def test_inception_below_its_auxiliary_classifiers_minimum_is_refused_with_the_minimum():
    with pytest.raises(ConfigError, match=r"inception_v3 cannot take 128 px; it accepts at least 299"):
        models.build_registry("inception_v3", 128)


@pytest.mark.no_process
@pytest.mark.parametrize("name,size", [("regnet_x_400mf", 32), ("maxvit_t", 224), ("swin_t", 8), ("alexnet", 63)])
def test_awkward_models_pass_the_meta_device_dry_run_at_their_smallest_size(name, size):
    details = models.validate_workload(name, size)
    assert details["parameters"] > 0 and details["image_size"] == size and details["dry_run_loss"] is None


@pytest.mark.no_process
def test_registry_deeplabv3_resnet101_is_the_same_network_as_the_reference_workload():
    from bench.workloads.deeplabv3 import build_model as build_deeplabv3
    with torch.device("meta"):
        reference = build_deeplabv3()[0]
    details = models.validate_workload("deeplabv3_resnet101", 64)
    assert details["parameters"] == sum(p.numel() for p in reference.parameters())
    assert details["num_classes"] == 21


def test_registry_names_cover_classification_segmentation_and_detection_only():
    names = models.registry_names()
    for n in ("resnet50", "vit_b_16", "inception_v3", "deeplabv3_resnet101", "lraspp_mobilenet_v3_large",
              "fasterrcnn_resnet50_fpn", "ssd300_vgg16"):
        assert n in names
    for n in ("r3d_18", "raft_small", "quantized_resnet50"):
        assert n not in names


def test_unknown_name_suggests_close_matches_and_the_other_forms():
    with pytest.raises(ConfigError, match=r"unknown model 'resnet5'; did you mean resnet50, ") as e:
        models.resolve_workload_name("resnet5")
    assert "MODULE:FUNCTION" in str(e.value) and "'deeplabv3'" in str(e.value)
    with pytest.raises(ConfigError, match=r"did you mean vit_b_16"):
        models.resolve_workload_name("VIT_B_16")
    assert models.resolve_workload_name("deeplabv3") == "deeplabv3"


@pytest.mark.parametrize("name,reason", [("r3d_18", "video models"), ("raft_small", "optical-flow"),
                                         ("quantized_resnet50", r"quantized models .* no backward pass; benchmark the float model instead \('resnet50'\)")])
def test_unsupported_torchvision_families_are_refused_with_their_reason(name, reason):
    with pytest.raises(ConfigError, match=f"{name}.*not supported: {reason}"):
        models.resolve_workload_name(name)


# ---------------------------------------------------------------- detection, packed into one tensor

class RecordingDetector(torch.nn.Module):
    """Stands in for a torchvision detector: records what the wrapper hands it."""
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(()))
        self.seen = []

    def forward(self, images, targets):
        self.seen.append((images, targets))
        return {"a": self.w * len(images), "b": self.w}


def test_packed_detection_rows_carry_each_images_own_boxes_through_a_dim0_split():
    from bench.workloads import detection
    x, boxes = detection.make_batch(16, 5, torch.Generator().manual_seed(0), 4)
    inner = RecordingDetector()
    wrapped = detection.PackedDetection(inner, 16)
    out = torch.cat([wrapped(x[:2]), wrapped(x[2:])])  # what DataParallel's scatter and gather do
    assert out.shape == (4,) and torch.equal(out, torch.tensor([3.0, 3.0, 3.0, 3.0]))
    images = [im for seen, _ in inner.seen for im in seen]
    targets = [t for _, seen in inner.seen for t in seen]
    for i in range(4):
        assert torch.equal(images[i], x[i, :3 * 16 * 16].reshape(3, 16, 16))
        assert torch.equal(targets[i]["boxes"], boxes[i, :, :4]) and torch.equal(targets[i]["labels"], boxes[i, :, 4].long())
    assert (boxes[..., 2:4] > boxes[..., 0:2]).all() and (boxes[..., 4] >= 1).all()  # valid boxes, no background label


@pytest.mark.no_process
@pytest.mark.parametrize("name", ["fasterrcnn_mobilenet_v3_large_320_fpn", "maskrcnn_resnet50_fpn", "keypointrcnn_resnet50_fpn"])
def test_detection_models_train_a_step_from_packed_rows_with_their_own_target_kinds(name, no_downloads):
    details = models.validate_workload(name, 512)
    assert details["task"] == "detection" and details["image_size"] == 512 and details["dry_run_image_size"] == 32
    assert details["input_shape"] == [3 * 512 * 512 + 5 * 2] and details["parameters"] > 1_000_000
    assert details["dry_run_loss"] > 0 and details["min_batch_per_replica"] == 2


def test_ssd_accepts_only_the_size_it_resizes_to():
    assert models.natural_size("ssd300_vgg16") == 300
    with pytest.raises(ConfigError, match=r"ssd300_vgg16 resizes every image to 300 px, so it accepts only 300"):
        models.build_registry("ssd300_vgg16", 256)


# ---------------------------------------------------------------- the user's own model

def test_example_user_model_builds_and_dry_runs_by_relative_path(monkeypatch):
    monkeypatch.chdir(REPO)
    text = models.resolve_workload_name("examples/my_model.py:build")
    assert text == f"{EXAMPLE}:build"
    details = models.validate_workload(text, image_size=16)
    assert details["parameters"] == 3 * 16 * 9 + 16 + 2 * 16 + 16 * 10 + 10
    assert details["input_shape"] == [3, 16, 16] and details["min_batch_per_replica"] == 2
    assert details["source"] == text


def test_user_model_in_a_package_is_found_by_dotted_name(monkeypatch, tmp_path):
    pkg = tmp_path / "userpkg_models_test"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "nets.py").write_text(EXAMPLE.read_text().replace("def build(image_size=None)", "def make()").replace("image_size or ", ""))
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = models.build_workload("userpkg_models_test.nets:make", image_size=8)
    assert spec.task == "user" and spec.image_size == 8
    details = check_spec(spec, "userpkg_models_test.nets:make")
    assert details["input_shape"] == [3, 32, 32]  # make() takes no image_size, so the model keeps its own


def test_a_file_path_workload_is_importable_by_the_same_text_in_another_process(tmp_path):
    text = usermodel.normalize(os.path.relpath(EXAMPLE, os.getcwd()) + ":build")
    code = ("import sys; from bench.workloads.usermodel import build_user; "
            "print(type(build_user(sys.argv[1], 8).model).__name__)")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", code, text], cwd=tmp_path, capture_output=True, text=True, env=env,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "Sequential"


GOOD = """
import torch
from torch import nn
def make_batch(g, b):
    return torch.randn(b, 4, generator=g), torch.randint(0, 3, (b,), generator=g)
def build():
    return {"model": nn.Linear(4, 3), "make_batch": make_batch, "loss_fn": nn.functional.cross_entropy}
"""

BROKEN = {
    "missing function": (GOOD, "buld", r"has no function 'buld'; did you mean build"),
    "syntax error": ("def build(:\n", "build", r"line 1: SyntaxError"),
    "import fails inside": ("import no_such_module_xyz\n", "build", r"importing .* failed: ModuleNotFoundError"),
    "not callable": (GOOD + "\nthing = 3\n", "thing", r"'thing' is a int, not a function"),
    "needs arguments": (GOOD + "\ndef build2(depth):\n    return build()\n", "build2", r"requires argument\(s\) depth"),
    "builder raises": (GOOD + "\ndef build2():\n    raise RuntimeError('boom')\n", "build2", r"raised RuntimeError: boom"),
    "returns a list": (GOOD + "\ndef build2():\n    return list(build().values())\n", "build2",
                       r"returned a list; expected a dict with keys model, make_batch, loss_fn"),
    "lacks loss_fn": (GOOD + "\ndef build2():\n    d = build(); del d['loss_fn']; return d\n", "build2", r"lacks loss_fn"),
    "misspelt key": (GOOD + "\ndef build2():\n    d = build(); d['lossfn'] = d['loss_fn']; return d\n", "build2",
                     r"unknown key\(s\) 'lossfn'"),
    "model not a module": (GOOD + "\ndef build2():\n    d = build(); d['model'] = 'net'; return d\n", "build2",
                           r"model is a str; expected a torch.nn.Module"),
    "make_batch returns a list": (GOOD + "\ndef build2():\n    d = build(); d['make_batch'] = lambda g, b: [torch.zeros(b, 4)] * 3; return d\n",
                                  "build2", r"make_batch\(generator, 2\) returned a list; expected an \(inputs, targets\) pair"),
    "make_batch ignores batch": (GOOD + "\ndef build2():\n    d = build(); d['make_batch'] = lambda g, b: make_batch(g, 2); return d\n",
                                 "build2", r"make_batch\(generator, 3\) returned inputs of shape \(2, 4\); expected dim 0 = 3"),
    "make_batch not seeded": (GOOD + "\ndef build2():\n    d = build(); d['make_batch'] = lambda g, b: make_batch(None, b); return d\n",
                              "build2", r"different batches for two generators seeded alike"),
    "loss not scalar": (GOOD + "\ndef build2():\n    d = build(); d['loss_fn'] = lambda o, y: nn.functional.cross_entropy(o, y, reduction='none'); return d\n",
                        "build2", r"loss_fn returned a tensor of shape \(2,\); expected a scalar"),
    "loss not finite": (GOOD + "\ndef build2():\n    d = build(); d['loss_fn'] = lambda o, y: o.sum() * float('nan'); return d\n",
                        "build2", r"the loss is nan"),
    "no parameters": (GOOD + "\ndef build2():\n    d = build(); d['model'] = nn.ReLU(); return d\n", "build2",
                      r"no trainable parameters"),
    "forward raises": (GOOD + "\ndef build2():\n    d = build(); d['model'] = nn.Linear(5, 3); return d\n", "build2",
                       r"forward on inputs of shape \(2, 4\) raised RuntimeError"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_broken_user_contract_is_refused_naming_the_problem(case, tmp_path):
    source, func, message = BROKEN[case]
    path = tmp_path / f"user_{case.replace(' ', '_')}.py"
    path.write_text(textwrap.dedent(source))
    with pytest.raises(ConfigError, match=message) as e:
        models.validate_workload(f"{path}:{func}", image_size=None)
    assert f"--workloads {path}:{func}: " in str(e.value)


def test_missing_file_and_missing_module_are_refused_before_anything_runs(tmp_path):
    with pytest.raises(ConfigError, match=r"file '.*nowhere.py' does not exist"):
        models.validate_workload("nowhere.py:build")
    with pytest.raises(ConfigError, match=r"no module named 'no_such_pkg_xyz'"):
        usermodel.load_user_builder("no_such_pkg_xyz.mod:build")
    with pytest.raises(ConfigError, match=r"expected MODULE:FUNCTION"):
        models.resolve_workload_name("my_mod:")


def test_the_broken_contract_docs_workloads_md_quotes_is_the_message_the_suite_prints(tmp_path, monkeypatch):
    """docs/workloads.md quoted a make_batch returning a list as refused, but a list of two tensors is accepted (a
    user tried it: it ran). The quote is now a make_batch that returns the images alone, run here as a module
    `my_mod:build`, and its message must appear in the docs word for word."""
    source = EXAMPLE.read_text().replace("make_batch = lambda g, batch: (torch.randn(batch, 3, side, side, generator=g),\n"
                                         "                                   torch.randint(0, 10, (batch,), generator=g))",
                                         "make_batch = lambda g, batch: torch.randn(batch, 3, side, side, generator=g)")
    assert source != EXAMPLE.read_text()
    (tmp_path / "my_mod.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "my_mod", raising=False)
    try:
        with pytest.raises(ConfigError) as e:
            models.validate_workload("my_mod:build")
    finally:
        sys.modules.pop("my_mod", None)
    assert "returned a tensor of shape (2, 3, 32, 32)" in str(e.value)
    assert f"`{e.value}`" in (REPO / "docs" / "workloads.md").read_text()
