"""CLI: profiles, cost, and error handling (one line, non-zero exit, no traceback)."""

from __future__ import annotations

import json

import pytest

from dcpsim.cli import main


def run(capsys, *argv):
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_profiles_list_and_show(capsys):
    rc, out, _ = run(capsys, "profiles", "--json")
    assert rc == 0
    names = [r["name"] for r in json.loads(out)]
    assert "h100-sxm" in names
    rc, out, _ = run(capsys, "profiles", "show", "h200-sxm", "--json")
    d = json.loads(out)
    assert rc == 0 and d["name"] == "h200-sxm" and d["sources"]["hbm_bytes"]


def test_cost_json_matches_api(capsys):
    from dcpsim.cost import CostModel

    # pp 4: the pack fits (a pack that does not fit exits 2, see tests/test_cost.py)
    rc, out, _ = run(capsys, "cost", "--model", "llama-13b", "--gpu", "h100-sxm", "--tp", "1", "--pp", "4", "--cp", "4",
                     "--lengths", "32768,4096,1024", "--json")
    assert rc == 0
    d = json.loads(out)
    # a bare name reads the calibrated profile, as simulate does (the datasheet one is h100-sxm-datasheet)
    ref = CostModel.build("h100-sxm-calibrated", "llama-13b", tp=1, pp=4, dp_cp=4).pack_cost([32768, 4096, 1024], 4,
                                                                                            check_memory=False)
    assert d["breakdown_s"]["total_s"] == pytest.approx(ref.total_s)
    assert d["config"]["gpu"] == "h100-sxm-calibrated" and d["profile"].startswith("h100-sxm-calibrated: calibrated")
    rc, out, _ = run(capsys, "cost", "--lengths", "32768,4096,1024", "--cp", "4")
    assert rc == 0 and "gemm_fwd" in out


def test_cost_refuses_an_optimizer_group_smaller_than_the_cp_group(capsys):
    """`cost --cp 4 --dp-cp 2` priced memory with the optimizer sharded over 2 ranks while the pack runs on a CP
    group of 4 (19.7 GiB, an impossible layout): refused, naming --dp-cp, its value and the bound."""
    rc, _, err = run(capsys, "cost", "--lengths", "1000", "--cp", "4", "--dp-cp", "2")
    assert rc == 2 and "--dp-cp" in err and "got 2" in err and ">= --cp (4)" in err
    rc, _, _ = run(capsys, "cost", "--lengths", "1000", "--cp", "4", "--dp-cp", "8")
    assert rc == 0


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["cost", "--lengths", "3,x"], "--lengths"),
        (["cost", "--lengths", "100", "--gpu", "nope"], "gpu"),
        (["cost", "--lengths", "100", "--pp", "7"], "pp"),
        (["profiles", "show", "nope"], "gpu"),
    ],
)
def test_bad_input_is_one_line(capsys, argv, needle):
    rc, out, err = run(capsys, *argv)
    assert rc == 2
    assert needle in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_argparse_errors_are_one_line(capsys):
    try:  # argparse exits; config-derived flags are checked by the config model and return 2
        rc = main(["cost", "--cp", "notanint", "--lengths", "1"])
    except SystemExit as exc:
        rc = exc.code
    assert rc == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "--cp" in err


def test_workload_show_json_and_plot(capsys, tmp_path):
    png = tmp_path / "h.png"
    rc, out, _ = run(capsys, "workload", "show", "commoncrawl", "--samples", "5000", "--max-len", "131072",
                     "--plot", str(png), "--json")
    assert rc == 0
    d = json.loads(out)
    assert d["stats"]["count"] == 5000 and d["stats"]["max"] <= 131072
    assert png.stat().st_size > 1000
    rc, _, err = run(capsys, "workload", "show", "no-such-workload")
    assert rc == 2 and "workload" in err


def test_demo_main_job_compares_policies_under_the_bound(capsys):
    rc, out, _ = run(capsys, "demo", "--iterations", "1", "--json")
    assert rc == 0
    rows = {r["policy"].split()[0]: r for r in json.loads(out)["rows"]}
    assert set(rows) == {"packing", "dynamic", "dynamic-solver", "bound"}
    assert rows["packing"]["speedup"] == pytest.approx(1.0)
    for name in ("packing", "dynamic", "dynamic-solver"):
        # no simulated schedule is faster than the proven lower bound
        assert rows[name]["iter_s"] >= rows["bound"]["iter_s"] * (1 - 1e-9)


def test_help_lines_are_the_commands_own_and_help_imports_no_command():
    """`dcpsim --help` lists each sub-command with the help line its module registers, without importing any
    command module, numpy or pydantic (issue 24: lazy sub-commands); a command's own --help loads it."""
    import subprocess
    import sys

    from dcpsim.cli import COMMANDS, build_parser

    full = build_parser()
    sub = next(a for a in full._actions if a.__class__.__name__ == "_SubParsersAction")
    assert {a.dest: a.help for a in sub._choices_actions} == COMMANDS
    code = ("import sys\nfrom dcpsim.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "bad = [m for m in sys.modules if m.startswith(('dcpsim.commands', 'numpy', 'pydantic', 'dcpsim.run'))]\n"
            "print('LOADED', bad)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "LOADED []" in out and "simulate" in out
    with pytest.raises(SystemExit) as e:
        main(["simulate", "--help"])
    assert e.value.code == 0


def test_ctrl_c_while_the_command_loads_is_one_line(monkeypatch, capsys):
    """Ctrl-C in the first ~0.2 s of `dcpsim sweep ...` (building the parser imports the command's modules, numpy)
    printed a KeyboardInterrupt traceback; it is 'dcpsim: interrupted', status 130, as later in the command."""
    import dcpsim.cli as cli

    def interrupted(*_a, **_k):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "build_parser", interrupted)
    assert main(["sweep", "x.toml", "--out", "o"]) == 130
    assert capsys.readouterr().err == "dcpsim: interrupted\n"
