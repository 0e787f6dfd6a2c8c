"""The heterogeneous family's reproduce jobs (docs/heterogeneous-records.md): FedGH's CIFAR-10
check runs exactly fedtgp/table1's cpu stand-in cells, FedMRL's own-setting check runs FedGH's
own-setting cells plus FedMRL's, and the family's jobs name the rows the docs say they run."""

from fedshare.paper.compare import entries
from fedshare.reproduce import cells, load_job


def test_fedghs_check_runs_the_cells_of_fedtgps_cpu_stand_in():
    """fedgh/cifar10's cells are stored from fedtgp/table1's cpu runs: the same run folders and
    the same overrides (as a set: their order differs only where keys differ)."""
    tgp = {c.folder: set(c.overrides) for c in cells("fedtgp/table1", "cpu")}
    gh = {c.folder: set(c.overrides) for c in cells("fedgh/cifar10", "cpu")}
    assert gh and set(gh) <= set(tgp)
    assert all(gh[folder] == tgp[folder] for folder in gh)
    assert {f.split("/")[1] for f in gh} == {
        "local_only",
        "lg_fedavg",
        "fml",
        "fedkd",
        "fedproto",
        "fedgh",
    }


def test_fedmrls_check_runs_the_cells_of_fedghs_own_setting_plus_fedmrl():
    """fedmrl/cifar10_n10 shares fedgh/cifar10_n10's run folders (the same overrides) for every
    row but FedMRL's; both are the papers' N = 10 setting: 10 clients of 2 classes, five models."""
    gh = {c.folder: c.overrides for c in cells("fedgh/cifar10_n10", "cpu")}
    mrl = {c.folder: c.overrides for c in cells("fedmrl/cifar10_n10", "cpu")}
    assert set(gh) < set(mrl)
    assert all(mrl[folder] == gh[folder] for folder in gh)
    assert {f.split("/")[1] for f in gh} == {
        "local_only",
        "lg_fedavg",
        "fd",
        "fedproto",
        "fml",
        "fedkd",
        "fedgh",
    }
    assert {f.split("/")[1] for f in set(mrl) - set(gh)} == {"fedmrl"}
    overrides = next(iter(gh.values()))
    assert {"partition=pat2", "clients.num=10", "clients.fraction=1.0"} <= set(overrides)
    models = next(o for o in overrides if o.startswith("clients.models="))
    assert models.count("{name:") == 5


def test_the_family_jobs_rows():
    """FedProto's table: the rows fedshare has (FeSEM, FedPer, FedRep not); FedTGP's: every row
    (FedGen with heads only), plus local-only and FedGH; the family check: the methods without
    a job of their own (FedGen with heads only among them), and the local-only floor."""
    proto = load_job("fedproto/table1")
    assert [m for m, o in proto.methods.items() if o is not None] == [
        "local_only",
        "fedprox",
        "fedavg",
        "fedproto",
        "fedproto_mh",
    ]
    assert {e.method for e in entries("fedproto_table1")} >= {"fesem", "fedper", "fedrep"}
    tgp = {c.method for c in cells("fedtgp/table1", "cpu", seeds=[0])}
    assert tgp == {
        "lg_fedavg",
        "fedgen",
        "fml",
        "fedkd",
        "fd",
        "fedproto",
        "fedtgp",
        "local_only",
        "fedgh",
    }
    family = {c.method for c in cells("hetero/family", "preset", seeds=[0])}
    assert family == {"local_only", "fd", "fml", "lg_fedavg", "fedkd", "fedmrl", "fedgen"}


def test_fds_and_fmls_checks_share_lg_fedavgs_pathological_mnist_cells():
    """fd/mnist and fml/mnist run on lg_fedavg/mnist's pathological cpu column: their FedAvg and
    LocalOnly cells are the same run folders with the same overrides, and each adds its own
    method's row; LG-FedAvg's job fills the authors' IID numbers and runs the same rows there."""
    lg = {c.folder: set(c.overrides) for c in cells("lg_fedavg/mnist", "cpu")}
    for job, own in (("fd/mnist", "fd"), ("fml/mnist", "fml")):
        found = {c.folder: set(c.overrides) for c in cells(job, "cpu")}
        shared = {f for f in found if f.split("/")[1] in ("fedavg", "local_only")}
        assert len(shared) == 4 and shared <= set(lg)
        assert all(found[f] == lg[f] for f in shared)
        assert {f.split("/")[1] for f in found} == {"fedavg", "local_only", own}
        assert all(f"strategy={own}" in found[f] for f in found if f.split("/")[1] == own)
    assert {(c.column, c.method) for c in cells("lg_fedavg/mnist", "paper", seeds=[0])} == {
        ("lg_fedavg/mnist_iid", m) for m in ("local_only", "lg_fedavg", "fedavg")
    }
    assert {f.split("/")[0] for f in lg} == {"mnist_iid", "mnist_pat2"}
