"""Messages in the user's words: byte-order marks, lengths outside the range, GPUs without published runs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from dcpsim.cli import main
from dcpsim.errors import ConfigError
from tests.test_files import _one_line_error  # one definition of the one-line error check

BOM = b"\xef\xbb\xbf"


@pytest.mark.parametrize("name,text", [
    ("header.csv", "length,source\n1000,a\n2000,b\n3000,c\n"),
    ("plain.csv", "1000\n2000\n3000\n"),
    ("plain.txt", "1000\n2000\n3000\n"),
    ("lines.jsonl", '{"length": 1000}\n{"length": 2000}\n{"length": 3000}\n'),
])
def test_a_lengths_file_with_a_byte_order_mark_reads_like_one_without(tmp_path, name, text):
    from dcpsim.workload.loaders import read_lengths as load_lengths

    plain, marked = tmp_path / name, tmp_path / f"bom-{name}"
    plain.write_text(text)
    marked.write_bytes(BOM + text.encode())
    a, b = load_lengths(plain), load_lengths(marked)
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert list(np.asarray(b)) == [1000, 2000, 3000]


def test_a_run_file_and_a_profile_table_with_a_byte_order_mark_load(tmp_path):
    from dcpsim.run import load_config

    p = tmp_path / "run.toml"
    p.write_bytes(BOM + b'[workload]\ngbs = 64\n')
    assert load_config(p).workload.gbs == 64
    from dcpsim.schema import read_text

    assert read_text(p, "x").startswith("[workload]")


def test_lengths_all_below_min_len_say_so_in_plain_words(tmp_path, capsys):
    lengths = tmp_path / "short.txt"
    lengths.write_text("100\n200\n")
    run = tmp_path / "run.toml"
    run.write_text(f'[workload]\nname = "{lengths}"\ngbs = 16\n[cluster]\ngpus = 16\n')
    rc = main(["simulate", str(run)])
    err = _one_line_error(capsys, rc, "below min_len 256", "longest is 200", "truncate")
    assert "acceptance" not in err and "Clipped" not in err


def test_clipping_that_reaches_nothing_names_the_side():
    from dcpsim.workload.distributions import Clipped, Empirical

    base = Empirical(np.array([5000, 6000]), "test")
    with pytest.raises(ConfigError, match="above max_len 1000"):
        Clipped(base, min_len=1, max_len=1000).sample(8, np.random.default_rng(0))


def test_calibrate_a_gpu_without_published_runs_lists_those_that_have(capsys):
    rc = main(["calibrate", "--gpu", "b200"])
    _one_line_error(capsys, rc, "--gpu", "no", "published runs", "b200", "h100-sxm")
    assert "--params" not in capsys.readouterr().err


def test_repo_examples_still_exist():
    assert (Path(__file__).resolve().parents[1] / "examples" / "simulate_default.toml").is_file()


# ---------------------------------------------------------------- over-long names: one line, never a traceback
@pytest.mark.parametrize("argv", [
    ["simulate", "{repo}/examples/simulate_default.toml", "--out", "{tmp}/{long}"],
    ["simulate", "{repo}/examples/simulate_default.toml", "--trace", "{tmp}/{long240}.json"],
    ["simulate", "{tmp}/{long}.toml"],
    ["workload", "show", "{tmp}/{long}.csv"],
    ["plot", "{tmp}/{long}", "--x", "gpus"],
    ["sweep", "{tmp}/{long}.toml", "--out", "{tmp}/o"],
])
def test_a_300_character_name_is_one_line(tmp_path, capsys, argv):
    repo = Path(__file__).resolve().parents[1]
    args = [a.format(repo=repo, tmp=tmp_path, long="a" * 300, long240="b" * 240) for a in argv]
    rc = main(args)
    err = _one_line_error(capsys, rc)
    assert "255" in err or "234" in err, err
    assert not any(p.name.startswith(("a" * 100, "b" * 100)) for p in tmp_path.iterdir())


# ---------------------------------------------------------------- examples anywhere, python -m dcpsim
def test_examples_by_name_and_by_their_readme_path_from_another_folder(tmp_path, monkeypatch, capsys):
    from dcpsim.resources import examples, resolve_input

    monkeypatch.chdir(tmp_path)  # no examples/ here: the shipped copy is read
    assert resolve_input("examples/simulate_default.toml") == examples()["default"]
    assert resolve_input("example:default") == examples()["default"] == resolve_input("example:simulate_default")
    assert set(examples()) >= {"default", "example_sweep"}
    assert main(["simulate", "example:default", "--set", "workload.gbs=16", "--set", "cluster.gpus=16"]) == 0
    capsys.readouterr()
    rc = main(["simulate", "example:nosuch"])
    _one_line_error(capsys, rc, "example", "example:default")
    assert main(["examples", "--out", str(tmp_path / "ex")]) == 0
    assert (tmp_path / "ex" / "simulate_default.toml").read_bytes() == examples()["default"].read_bytes()
    assert not [p for p in tmp_path.iterdir() if p.name != "ex"]


def test_python_dash_m_dcpsim(tmp_path):
    import os
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(repo), os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, "-m", "dcpsim", "--help"], capture_output=True, text=True, cwd=tmp_path,
                       env=env, timeout=120)
    assert r.returncode == 0 and "examples" in r.stdout, r.stderr


# ---------------------------------------------------------------- tables fit 100 columns; progress only on a terminal
def test_tables_fit_100_columns_and_wide_shows_everything(capsys):
    assert main(["profiles"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert max(len(x) for x in lines) <= 100, out
    assert "h100-sxm-calibrated" in out and "…" not in out and "calibration" in out  # names whole, not squeezed
    assert main(["profiles", "--wide"]) == 0
    wide = capsys.readouterr().out
    assert "GPUs/node" in wide and "more column" not in wide
    assert main(["profiles", "show", "h100-sxm"]) == 0
    shown = capsys.readouterr().out
    assert max(len(x) for x in shown.splitlines()) <= 100 and "timing.gemm_efficiency_scale" in shown


def test_print_table_names_the_columns_it_leaves_out(capsys):
    from dcpsim.commands._common import print_table

    rows = [{f"column_{i}": 123456.789 * i for i in range(20)}]
    print_table(rows, title="t")
    out = capsys.readouterr().out
    assert max(len(x) for x in out.splitlines()) <= 100
    assert "more columns: " in out and "column_19" in out and "--wide" in out


def test_progress_is_quiet_when_output_is_not_a_terminal(capsys):
    from dcpsim.progress import ProgressDisplay, show_progress

    assert show_progress() is False and show_progress(True) is True  # pytest captures: not a terminal
    with ProgressDisplay("x", 3) as bar:
        bar.advance(note="a")
    assert bar.done == 1 and capsys.readouterr().err == ""


@pytest.mark.parametrize("argv", [["simulate", "example:example_sweep"],
                                  ["cost", "--config", "example:faults_network", "--lengths", "100"],
                                  ["schedule", "--config", "example:example_sweep"]])
def test_a_sweep_spec_given_as_a_run_file_says_so(capsys, argv):
    """A sweep spec where a run file is expected was refused as "sweep: ... expected a known key ('sweep' is not
    one ...)": now it names the file as a sweep spec and the command that runs it."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "sweep spec" in err and "dcpsim sweep example:" in err and "\n" not in err.strip(), err


@pytest.mark.parametrize("argv,field", [(["workload", "list", "github"], "name"),
                                        (["workload", "list", "--plot", "x.png"], "--plot")])
def test_workload_list_refuses_what_only_show_uses(capsys, argv, field):
    """`dcpsim workload list github` printed the preset list and dropped 'github' (and --plot) without a word."""
    rc = main(argv)
    _one_line_error(capsys, rc, field, "workload show")


def test_profiles_list_refuses_a_name(capsys):
    """`dcpsim profiles list h100-sxm` printed every profile and dropped the name without a word."""
    rc = main(["profiles", "list", "h100-sxm"])
    _one_line_error(capsys, rc, "name", "h100-sxm", "profiles show h100-sxm")
    assert main(["profiles", "list", "--json"]) == 0


def test_simulate_table_gives_mfu_in_percent_like_its_other_shares(capsys):
    """The per-iteration table headed a fraction "MFU" (0.124) beside "compute % 28.79" and under a summary line
    "MFU 13.8%": read as 0.124%. The column is now "MFU %" in percent, like the shares and the summary."""
    toml = str(Path(__file__).resolve().parents[1] / "examples" / "simulate_default.toml")
    assert main(["simulate", toml, "--set", "sim.iterations=1", "--json"]) == 0
    mfu = json.loads(capsys.readouterr().out)["iterations"][0]["mfu"]
    assert main(["simulate", toml, "--set", "sim.iterations=1", "--wide"]) == 0
    out = capsys.readouterr().out
    assert "MFU %" in out and f"{100 * mfu:.3f}" in out, out


@pytest.mark.parametrize("suffix", ["/", ""])
def test_demo_trace_prefix_that_is_a_folder_is_refused_before_any_work(tmp_path, capsys, suffix):
    """`dcpsim demo --trace out/` wrote hidden files out/-packing.json ... (the prefix was the folder itself):
    a folder given as the prefix is refused, naming a prefix inside it; nothing is written."""
    d = tmp_path / "out"
    d.mkdir()
    rc = main(["demo", "--trace", str(d) + suffix])
    _one_line_error(capsys, rc, "--trace", "not a folder", str(d / "demo"))
    assert not list(d.iterdir()) and sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_missing_relative_lengths_file_says_where_it_was_looked_for(tmp_path, monkeypatch, capsys):
    """A run file beside its lengths file (workload.name = "l.txt"), run from another folder, was refused as
    "expected a preset name [...] or the path of an existing lengths file" with no word that relative paths are
    read from the current folder, not the run file's."""
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "l.txt").write_text("1000\n2000\n")
    (tmp_path / "runs" / "run.toml").write_text('[workload]\nname = "l.txt"\nmin_len = 1\n')
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    rc = main(["simulate", str(tmp_path / "runs" / "run.toml")])
    _one_line_error(capsys, rc, "workload", "l.txt", "current folder", str(tmp_path / "elsewhere"))


def test_examples_list_says_what_each_is_in_whole_sentences(capsys):
    """`dcpsim examples` described example_sweep as "... for Llama-13B on H100 SXM," and faults_network as "... on
    the ideal and the shared network:": the first comment line, cut mid-sentence. Now the opening paragraph."""
    assert main(["examples", "--json"]) == 0
    whats = {e["name"]: e["what"] for e in json.loads(capsys.readouterr().out)["examples"]}
    assert whats and all(w and not w.endswith((",", ":")) for w in whats.values()), whats
    assert whats["example:example_sweep"].endswith("network bandwidth.")
    assert whats["example:default"] == "One run of dcpsim's simulator"


@pytest.mark.parametrize("argv,field", [
    (["simulate", "example:default", "--policy", "packing", "--set", 'policy.name="dynamic-solver"'], "policy.name"),
    (["schedule", "--policy", "packing", "--option", 'too_long="drop"', "--set", 'policy.options.too_long="error"'],
     "policy.options.too_long"),
])
def test_a_flag_and_a_set_that_disagree_are_refused(capsys, argv, field):
    """`simulate --policy packing --set policy.name="dynamic-solver"` simulated dynamic-solver (the --set won without
    a word); `schedule --option K=a --set policy.options.K=b` likewise. Two values for one field are refused, as two
    --set items already were."""
    rc = main(argv)
    _one_line_error(capsys, rc, f"--set {field}", "disagree")


def test_megatron_gpus_and_a_set_that_disagree_are_refused(tmp_path, capsys):
    from dcpsim.export.megatron import megatron_args
    from dcpsim.run.load import load_config

    f = tmp_path / "args.txt"
    f.write_text("\n".join(megatron_args(load_config("example:default"), policy="dynamic")))
    rc = main(["simulate", "--megatron-args", str(f), "--gpus", "64", "--set", "cluster.gpus=128"])
    _one_line_error(capsys, rc, "--set cluster.gpus", "--gpus 64", "disagree")


def test_simulate_summary_line_does_not_report_zero_events_per_second_for_the_fast_engine(capsys):
    """The fast engine (the default where the network allows) has no event queue: the summary line said "0 events in
    0.014 s (0 events/s)", a speed figure of zero for a run that was simulated. It now names the fast engine; the
    events engine still reports its events."""
    toml = str(Path(__file__).resolve().parents[1] / "examples" / "simulate_default.toml")
    assert main(["simulate", toml, "--set", "sim.iterations=1"]) == 0
    out = capsys.readouterr().out
    assert "0 events/s" not in out and "fast engine" in out
    assert main(["simulate", toml, "--set", "sim.iterations=1", "--set", 'sim.engine="events"']) == 0
    assert " events in " in capsys.readouterr().out


def test_fixed_windows_over_memory_are_told_to_shorten_the_window(capsys):
    """Fixed-length windows too long for memory were told "lower parallel.max_tokens_per_rank", a field that does not
    apply to them (a microbatch is mbs windows of seq_len): the advice now names workload.seq_len / parallel.mbs."""
    toml = str(Path(__file__).resolve().parents[1] / "examples" / "simulate_default.toml")
    rc = main(["simulate", toml, "--policy", "packing", "--set", 'workload.name="fixed"', "--set",
               "workload.seq_len=300000", "--set", "workload.gbs=8", "--set", "sim.iterations=1"])
    err = _one_line_error(capsys, rc, "infeasible (memory)", "workload.seq_len")
    assert "max_tokens_per_rank" not in err
