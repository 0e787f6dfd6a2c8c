"""`resume=true` reads the run's settings from its folder's config.yaml."""

from test_cli import FAST, fedshare_run


def test_a_config_yaml_that_is_a_list_is_refused_in_one_sentence(tmp_path):
    out = tmp_path / "run"
    base = [a for a in FAST if not a.startswith("rounds=")]
    first = fedshare_run(*base, "rounds=1", f"hydra.run.dir={out}", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    (out / "config.yaml").write_text("- 1\n- 2\n")
    kept = (out / "checkpoint.pt").read_bytes()
    proc = fedshare_run(*base, "rounds=2", "resume=true", f"hydra.run.dir={out}", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "its config.yaml is a list, not the run's settings" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert (out / "checkpoint.pt").read_bytes() == kept
