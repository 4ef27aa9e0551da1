"""The cores a sweep plans for: a container's CPU quota (docker --cpus) cuts the affinity mask, which it leaves whole."""
from bench.machine import cores


def _write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_a_cgroup_v2_quota_cuts_the_cores_and_max_leaves_them(tmp_path, monkeypatch):
    monkeypatch.setattr(cores, "affinity_cores", lambda: 224)
    _write(tmp_path / "docker" / "abc" / "cpu.max", "400000 100000\n")   # docker run --cpus=4
    assert cores.quota_cores(str(tmp_path), "0::/docker/abc\n") == 4.0
    assert cores.usable_cores(str(tmp_path), "0::/docker/abc\n") == 4
    _write(tmp_path / "docker" / "abc" / "cpu.max", "250000 100000\n")   # 2.5 CPUs: 3 threads run, throttled
    assert cores.usable_cores(str(tmp_path), "0::/docker/abc\n") == 3
    _write(tmp_path / "docker" / "abc" / "cpu.max", "max 100000\n")
    assert cores.quota_cores(str(tmp_path), "0::/docker/abc\n") is None
    assert cores.usable_cores(str(tmp_path), "0::/docker/abc\n") == 224


def test_a_parents_quota_holds_and_v1_is_read_too(tmp_path, monkeypatch):
    monkeypatch.setattr(cores, "affinity_cores", lambda: 64)
    _write(tmp_path / "kubepods" / "cpu.max", "800000 100000\n")          # the pod's limit, set on the parent
    _write(tmp_path / "kubepods" / "c1" / "cpu.max", "max 100000\n")
    assert cores.usable_cores(str(tmp_path), "0::/kubepods/c1\n") == 8
    v1 = tmp_path / "v1"
    _write(v1 / "cpu,cpuacct" / "docker" / "x" / "cpu.cfs_quota_us", "200000\n")
    _write(v1 / "cpu,cpuacct" / "docker" / "x" / "cpu.cfs_period_us", "100000\n")
    assert cores.usable_cores(str(v1), "4:cpu,cpuacct:/docker/x\n3:memory:/docker/x\n") == 2
    _write(v1 / "cpu,cpuacct" / "docker" / "x" / "cpu.cfs_quota_us", "-1\n")
    assert cores.usable_cores(str(v1), "4:cpu,cpuacct:/docker/x\n") == 64


def test_nothing_readable_leaves_the_affinity_mask(tmp_path, monkeypatch):
    monkeypatch.setattr(cores, "affinity_cores", lambda: 6)
    assert cores.usable_cores(str(tmp_path / "absent"), "0::/x\n") == 6
    assert cores.usable_cores(str(tmp_path), "") == 6
    assert cores.usable_cores() >= 1   # this machine, whatever it holds


def test_the_plan_and_the_stored_environment_read_the_quota():
    import inspect
    from bench.machine import env
    from bench.sweep import plan
    assert "usable_cores()" in inspect.getsource(plan.detect_machine)
    assert "usable_cores()" in inspect.getsource(env.capture)
