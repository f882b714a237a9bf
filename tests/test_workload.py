"""Tests of dcpsim.workload: distributions, presets, loaders, statistics, plots."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dcpsim.errors import ConfigError
from dcpsim.report.lengths import plot_length_histograms  # noqa: E402
from dcpsim.workload import (
    LENGTH_CAP,
    PRESETS,
    Clipped,
    Empirical,
    LengthDistribution,
    LogNormal,
    LogNormalPareto,
    Mixture,
    distribution_from_dict,
    fit_lognormal_pareto,
    get_workload,
    hill_alpha,
    list_workloads,
    lognormal_from_mean,
    lognormal_pareto_from_mean,
    read_lengths,
    sample_global_batch,
    summarize,
)

WIKIPEDIA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "wikipedia_lengths.txt"


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def all_kinds(tmp_path: Path | None = None) -> list[LengthDistribution]:
    """One instance of every distribution type (nested ones included)."""
    ln = LogNormal(mu=6.0, sigma=1.0)
    lnp = LogNormalPareto(mu=5.95, sigma=1.26, tail_start=4096, alpha=1.55)
    emp = Empirical(np.array([3, 100, 2048, 70000]), source="hand-made")
    out: list[LengthDistribution] = [
        ln,
        lnp,
        emp,
        Clipped(lnp, min_len=64, max_len=32768, mode="drop"),
        Clipped(ln, max_len=1000, mode="truncate"),
        Mixture((ln, Clipped(lnp, min_len=10), emp), (0.5, 0.3, 0.2)),
    ]
    if tmp_path is not None:  # a large empirical set, serialised by reference
        f = tmp_path / "big.txt"
        f.write_text("\n".join(str(v) for v in rng(1).integers(1, 50000, size=5000)) + "\n")
        out.append(get_workload(f))
    return out


# ----------------------------------------------------------------------------
# serialisation, determinism, basic laws
# ----------------------------------------------------------------------------


def test_to_dict_round_trips_through_json(tmp_path: Path) -> None:
    for dist in all_kinds(tmp_path):
        d = dist.to_dict()
        assert isinstance(d["type"], str)
        assert None not in _leaves(d)  # TOML has no null
        back = distribution_from_dict(json.loads(json.dumps(d)))
        assert back == dist, dist
        assert type(back) is type(dist)


def _leaves(obj: object) -> list[object]:
    if isinstance(obj, dict):
        return [x for v in obj.values() for x in _leaves(v)]
    if isinstance(obj, list):
        return [x for v in obj for x in _leaves(v)]
    return [obj]


def test_from_dict_accepts_mean_instead_of_mu() -> None:
    d = distribution_from_dict({"type": "lognormal", "mean": 1000, "sigma": 1.0})
    assert d == lognormal_from_mean(1000, 1.0)
    p = distribution_from_dict(
        {"type": "lognormal_pareto", "mean": 1500, "sigma": 1.2, "tail_start": 4096, "alpha": 1.6}
    )
    assert p.mean_estimate() == pytest.approx(1500, rel=1e-9)


def test_seeded_sampling_is_deterministic(tmp_path: Path) -> None:
    for dist in all_kinds(tmp_path):
        a = dist.sample(5000, rng(42))
        b = dist.sample(5000, rng(42))
        c = dist.sample(5000, rng(43))
        assert a.dtype == np.int64 and a.shape == (5000,)
        assert a.min() >= 1
        np.testing.assert_array_equal(a, b)
        assert not np.array_equal(a, c)
    assert get_workload("github").sample(0, rng()).shape == (0,)


def test_lognormal_sample_mean_matches_analytic_mean() -> None:
    dist = lognormal_from_mean(1000.0, 1.0)
    assert dist.mu == pytest.approx(math.log(1000.0) - 0.5)
    assert dist.mean_estimate() == pytest.approx(1000.0)
    x = dist.sample(400_000, rng(3))
    # std of the sample mean: 1000 * sqrt(e - 1) / sqrt(n) ~ 2.1 tokens; ceil adds ~0.5
    assert x.mean() == pytest.approx(1000.5, abs=10.0)


def test_lognormal_pareto_splice() -> None:
    d = LogNormalPareto(mu=6.0, sigma=1.0, tail_start=2000, alpha=2.5)
    x = d.sample(400_000, rng(5))
    expected_tail = 0.5 * math.erfc((math.log(2000) - 6.0) / math.sqrt(2.0))
    assert d.tail_probability == pytest.approx(expected_tail)
    assert np.mean(x > 2000) == pytest.approx(expected_tail, abs=0.002)
    assert x.mean() == pytest.approx(d.mean_estimate(), rel=0.02)
    # inside the tail: P(X > 2t | X > t) = 2^-alpha
    tail = x[x > 2000]
    assert np.mean(tail > 4000) == pytest.approx(2**-2.5, abs=0.01)
    assert LogNormalPareto(mu=6.0, sigma=1.0, tail_start=2000, alpha=0.9).mean_estimate() == math.inf


def test_lognormal_pareto_from_mean_solves_mu() -> None:
    d = lognormal_pareto_from_mean(1234.0, 1.1, 4096, 1.7)
    assert d.mean_estimate() == pytest.approx(1234.0, rel=1e-9)
    with pytest.raises(ConfigError, match="alpha"):
        lognormal_pareto_from_mean(1000.0, 1.1, 4096, 1.0)


@pytest.mark.parametrize("mode", ["drop", "truncate"])
def test_clipped_stays_in_range(mode: str) -> None:
    base = get_workload("github")
    d = Clipped(base, min_len=256, max_len=16384, mode=mode)
    x = d.sample(200_000, rng(7))
    assert x.min() >= 256 and x.max() <= 16384
    if mode == "truncate":  # clamping piles mass at the bounds
        assert np.mean(x == 16384) > 0.005 and np.mean(x == 256) > 0.05
    else:  # conditioning does not
        assert np.mean(x == 16384) < 1e-3 and np.mean(x == 256) < 0.01
    assert x.mean() == pytest.approx(d.mean_estimate(), rel=0.02)


def test_clipped_drop_is_conditional_law_and_rejects_unreachable_range() -> None:
    emp = Empirical(np.array([1, 2, 3, 10, 11]), source="t")
    x = Clipped(emp, min_len=3, max_len=10).sample(30_000, rng(1))
    assert set(np.unique(x)) == {3, 10}
    assert np.mean(x == 3) == pytest.approx(0.5, abs=0.02)
    assert Clipped(emp, min_len=3, max_len=10).mean_estimate() == pytest.approx(6.5)
    with pytest.raises(ConfigError, match="min_len/max_len"):
        Clipped(emp, min_len=4, max_len=9).sample(10, rng())


def test_mixture_weights_and_mean() -> None:
    a = Empirical(np.array([10]), source="a")
    b = Empirical(np.array([1000]), source="b")
    m = Mixture((a, b), (1.0, 3.0))
    assert m.weights == (0.25, 0.75)
    x = m.sample(100_000, rng(2))
    assert np.mean(x == 10) == pytest.approx(0.25, abs=0.01)
    assert m.mean_estimate() == pytest.approx(0.25 * 10 + 0.75 * 1000)


def test_empirical_resamples_given_values() -> None:
    values = np.array([5, 7, 7, 4096])
    e = Empirical(values, source="x")
    x = e.sample(20_000, rng())
    assert set(np.unique(x)) <= {5, 7, 4096}
    assert np.mean(x == 7) == pytest.approx(0.5, abs=0.02)
    values[0] = 999  # the distribution holds its own copy
    assert e.lengths[0] == 5
    with pytest.raises(ValueError):
        e.lengths[0] = 1


def test_sample_global_batch() -> None:
    x = sample_global_batch(get_workload("commoncrawl"), 256, rng(9))
    assert x.dtype == np.int64 and x.shape == (256,)
    np.testing.assert_array_equal(x, sample_global_batch(get_workload("commoncrawl"), 256, rng(9)))
    with pytest.raises(ConfigError, match="gbs"):
        sample_global_batch(get_workload("commoncrawl"), 0, rng())


def test_samples_are_capped_for_int64_safety() -> None:
    d = LogNormalPareto(mu=6.0, sigma=1.0, tail_start=10, alpha=0.05)
    x = d.sample(10_000, rng())
    assert x.max() <= LENGTH_CAP
    assert (x.astype(np.int64) ** 2).min() > 0  # squares do not overflow


# ----------------------------------------------------------------------------
# presets and get_workload
# ----------------------------------------------------------------------------


def test_presets_have_their_documented_means() -> None:
    assert list_workloads() == ["commoncrawl", "github", "github-proxy", "wikipedia"]
    for name, preset in PRESETS.items():
        assert preset.name == name and preset.description and preset.sources
        dist = preset.distribution
        assert not isinstance(dist, Clipped)  # raw presets are unclipped
        assert dist.mean_estimate() == pytest.approx(preset.reference_mean_tokens, rel=0.05)
        x = dist.sample(200_000, rng(2024))
        assert x.mean() == pytest.approx(preset.reference_mean_tokens, rel=0.15), name


def test_preset_parameters_match_their_derivation() -> None:
    wiki = PRESETS["wikipedia"].distribution
    assert isinstance(wiki, LogNormalPareto)
    for name, mean in (("commoncrawl", 1100.0), ("github", 1700.0)):
        d = PRESETS[name].distribution
        assert isinstance(d, LogNormalPareto)
        assert (d.sigma, d.tail_start) == (wiki.sigma, wiki.tail_start)
        solved = lognormal_pareto_from_mean(mean, d.sigma, d.tail_start, d.alpha)
        assert d.mu == pytest.approx(solved.mu, abs=1e-4)
    assert PRESETS["github"].distribution.alpha < PRESETS["commoncrawl"].distribution.alpha


def test_get_workload_specs(tmp_path: Path) -> None:
    assert get_workload("GitHub") is PRESETS["github"].distribution
    d = {"type": "lognormal", "mu": 6.0, "sigma": 1.0}
    assert get_workload(d) == LogNormal(6.0, 1.0)
    clipped = get_workload("wikipedia", min_len=32, max_len=8192, clip="truncate")
    assert clipped == Clipped(PRESETS["wikipedia"].distribution, 32, 8192, "truncate")
    f = tmp_path / "lens.txt"
    f.write_text("10\n20\n30\n")
    emp = get_workload(f)
    assert isinstance(emp, Empirical) and emp.lengths.tolist() == [10, 20, 30]
    with pytest.raises(ConfigError, match="workload.*no_such_preset"):
        get_workload("no_such_preset")
    with pytest.raises(ConfigError, match="clip"):
        get_workload("github", max_len=100, clip="cut")
    with pytest.raises(ConfigError, match="max_len"):
        get_workload("github", min_len=100, max_len=10)


# ----------------------------------------------------------------------------
# fitting and statistics
# ----------------------------------------------------------------------------


@settings(max_examples=12, deadline=None)
@given(alpha=st.floats(1.1, 3.0), seed=st.integers(0, 2**32 - 1))
def test_hill_estimator_recovers_alpha(alpha: float, seed: int) -> None:
    truth = LogNormalPareto(mu=6.5, sigma=1.2, tail_start=4096, alpha=alpha)
    x = truth.sample(100_000, rng(seed))
    k = int(np.count_nonzero(x > 4096))  # ~7,500 tail draws: standard error alpha/sqrt(k)
    fit = fit_lognormal_pareto(x, tail_start=4096)
    assert fit.alpha == pytest.approx(alpha, abs=5 * alpha / math.sqrt(k) + 0.01)
    assert hill_alpha(x, 4096) == fit.alpha


def test_censored_fit_recovers_body_exactly() -> None:
    truth = LogNormalPareto(mu=6.0, sigma=1.1, tail_start=2048, alpha=1.8)
    x = truth.sample(200_000, rng(11))
    fit = fit_lognormal_pareto(x, tail_start=2048, method="censored")
    assert fit.mu == pytest.approx(6.0, abs=0.02)
    assert fit.sigma == pytest.approx(1.1, abs=0.02)
    with pytest.raises(ConfigError, match="method"):
        fit_lognormal_pareto(x, method="bayes")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="lengths"):
        fit_lognormal_pareto(np.array([1, 2, 3]), tail_start=4096)


def test_summarize() -> None:
    x = np.array([100, 200, 5000, 20000])
    s = summarize(x, thresholds=(4096, 16384))
    assert s["count"] == 4 and s["total_tokens"] == 25300 and s["max"] == 20000
    assert s["mean"] == pytest.approx(6325.0)
    assert s["median"] == pytest.approx(2600.0)
    assert s["seq_share_above_4096"] == pytest.approx(0.5)
    assert s["token_share_above_4096"] == pytest.approx(25000 / 25300)
    sq = np.array([100, 200, 5000, 20000], dtype=float) ** 2
    assert s["sq_share_above_16384"] == pytest.approx(sq[3] / sq.sum())
    for key in ("p90", "p99", "p99_9"):
        assert key in s
    json.dumps(s)
    with pytest.raises(ConfigError, match="lengths"):
        summarize(np.array([], dtype=np.int64))


def test_plot_length_histograms(tmp_path: Path) -> None:
    x = get_workload("wikipedia", max_len=131072).sample(20_000, rng())
    png = plot_length_histograms(x, tmp_path / "sub" / "h.png", title="wiki")
    pdf = plot_length_histograms(x, tmp_path / "h.pdf")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert pdf.read_bytes()[:5] == b"%PDF-"
    with pytest.raises(ConfigError, match="path"):
        plot_length_histograms(x, tmp_path / "h.jpeg")


# ----------------------------------------------------------------------------
# loaders
# ----------------------------------------------------------------------------

LENS = [12, 345, 6789, 1, 100000]


def test_read_text(tmp_path: Path) -> None:
    f = tmp_path / "lengths.txt"
    f.write_text("# comment\n12\n 345 \n\n6789\n1\n100000\n")
    out = read_lengths(f)
    assert out.dtype == np.int64 and out.tolist() == LENS
    g = tmp_path / "lengths"  # no suffix
    g.write_text("\n".join(map(str, LENS)))
    assert read_lengths(g).tolist() == LENS
    with pytest.raises(ConfigError, match="column: got 'x'; expected None"):
        read_lengths(g, column="x")


def test_read_csv(tmp_path: Path) -> None:
    f = tmp_path / "with_header.csv"
    pd.DataFrame({"doc": ["a", "b", "c", "d", "e"], "num_tokens": LENS}).to_csv(f, index=False)
    assert read_lengths(f).tolist() == LENS  # known key preferred over first column
    assert read_lengths(f, column="num_tokens").tolist() == LENS
    g = tmp_path / "first_col.csv"
    pd.DataFrame({"n": LENS, "other": [0] * 5}).to_csv(g, index=False)
    assert read_lengths(g).tolist() == LENS
    h = tmp_path / "no_header.csv"
    h.write_text("".join(f"{v},x\n" for v in LENS))
    assert read_lengths(h).tolist() == LENS
    assert read_lengths(h, column=0).tolist() == LENS
    with pytest.raises(ConfigError, match=r"with_header\.csv: column: got 'missing'"):
        read_lengths(f, column="missing")
    with pytest.raises(ConfigError, match="column.*no header"):
        read_lengths(h, column="num_tokens")


def test_read_parquet(tmp_path: Path) -> None:
    f = tmp_path / "l.parquet"
    pd.DataFrame({"text": list("abcde"), "length": LENS}).to_parquet(f)
    assert read_lengths(f).tolist() == LENS
    assert read_lengths(f, column="length").tolist() == LENS
    g = tmp_path / "ids.parquet"
    pd.DataFrame({"input_ids": [[1] * 3, [2] * 5]}).to_parquet(g)
    assert read_lengths(g).tolist() == [3, 5]
    with pytest.raises(ConfigError, match="column"):
        read_lengths(f, column="nope")


def test_read_jsonl(tmp_path: Path) -> None:
    for key in ("num_tokens", "length", "tokens", "len"):
        f = tmp_path / f"{key}.jsonl"
        f.write_text("".join(json.dumps({"id": i, key: v}) + "\n" for i, v in enumerate(LENS)))
        assert read_lengths(f).tolist() == LENS
    g = tmp_path / "lists.jsonl"
    g.write_text("".join(json.dumps({"tokens": list(range(v))}) + "\n" for v in (3, 1, 7)))
    assert read_lengths(g).tolist() == [3, 1, 7]
    h = tmp_path / "custom.jsonl"
    h.write_text("".join(json.dumps({"n": v}) + "\n" for v in LENS))
    assert read_lengths(h, column="n").tolist() == LENS
    with pytest.raises(ConfigError, match="column"):
        read_lengths(h)


@pytest.mark.parametrize(
    ("name", "content", "match"),
    [
        ("floats.txt", "1\n2.5\n3\n", r"length: got 2\.5; expected an integer"),
        ("words.txt", "1\nabc\n3\n", r"length: got 'abc'"),
        ("zero.txt", "1\n0\n3\n", r"length: got 0; expected a token count >= 1"),
        ("neg.txt", "1\n-4\n", r"length: got -4"),
        ("empty.txt", "", r"path: .*at least one length"),
        ("comments.txt", "# nothing\n\n", r"path: .*at least one length"),
        ("two.txt", "1 2\n3 4\n", r"path: .*one integer per line"),
        ("nan.csv", "num_tokens\n1\n\n2\n", None),
        ("bad.jsonl", "{not json\n", r"path: .*well-formed jsonl"),
        ("lengths.xyz", "1\n", r"path: .*suffix"),
    ],
)
def test_bad_files_raise_config_error(tmp_path: Path, name: str, content: str, match: str | None) -> None:
    f = tmp_path / name
    f.write_text(content)
    if match is None:  # blank CSV lines are skipped, not an error
        assert read_lengths(f).tolist() == [1, 2]
        return
    with pytest.raises(ConfigError, match=match):
        read_lengths(f)


def test_missing_value_in_csv_column(tmp_path: Path) -> None:
    f = tmp_path / "gap.csv"
    f.write_text("id,num_tokens\n1,5\n2,\n3,7\n")
    with pytest.raises(ConfigError, match=r"data row 2\): num_tokens: got 'missing'"):
        read_lengths(f)


def test_read_lengths_drop_empty_and_missing_file(tmp_path: Path) -> None:
    f = tmp_path / "z.txt"
    f.write_text("0\n5\n0\n6\n")
    assert read_lengths(f, drop_empty=True).tolist() == [5, 6]
    with pytest.raises(ConfigError, match="path: got '.*nowhere.txt'; expected an existing"):
        read_lengths(tmp_path / "nowhere.txt")
    with pytest.raises(ConfigError, match="path"):
        read_lengths(tmp_path)  # a directory


# ----------------------------------------------------------------------------
# bad parameters
# ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: LogNormal(mu=6.0, sigma=-1.0), "sigma"),
        (lambda: LogNormal(mu=float("nan"), sigma=1.0), "mu"),
        (lambda: LogNormal(mu="6", sigma=1.0), "mu"),
        (lambda: lognormal_from_mean(-5.0, 1.0), "mean"),
        (lambda: LogNormalPareto(6.0, 1.0, tail_start=0, alpha=1.5), "tail_start"),
        (lambda: LogNormalPareto(6.0, 1.0, tail_start=4096, alpha=-1.0), "alpha"),
        (lambda: Clipped(LogNormal(6, 1), min_len=0), "min_len"),
        (lambda: Clipped(LogNormal(6, 1), max_len=2.5), "max_len"),
        (lambda: Clipped(LogNormal(6, 1), mode="cut"), "mode"),  # type: ignore[arg-type]
        (lambda: Clipped("github"), "base"),  # type: ignore[arg-type]
        (lambda: Mixture((), ()), "components"),
        (lambda: Mixture((LogNormal(6, 1),), (1.0, 2.0)), "weights"),
        (lambda: Mixture((LogNormal(6, 1),), (-1.0,)), "weights"),
        (lambda: Empirical(np.array([1, 2.5]), source="x"), r"lengths\[1\]"),
        (lambda: Empirical(np.array([], dtype=int), source="x"), "lengths"),
        (lambda: Empirical(np.array([3, 0]), source="x"), r"lengths\[1\]"),
        (lambda: distribution_from_dict({"type": "weibull"}), "type"),
        (lambda: distribution_from_dict({"type": "lognormal", "mu": 1}), "sigma"),
        (lambda: distribution_from_dict({"type": "lognormal", "mu": 1, "sigma": 1, "x": 2}), "x"),
        (lambda: distribution_from_dict([1, 2]), "distribution"),  # type: ignore[arg-type]
        (lambda: LogNormal(6, 1).sample(-1, rng()), "n"),
        (lambda: LogNormal(6, 1).sample(5, np.random.RandomState(0)), "rng"),  # type: ignore[arg-type]  # noqa: NPY002
        (lambda: summarize(np.array([5, 10]), thresholds=(0,)), "thresholds"),
    ],
)
def test_bad_parameters_raise_config_error(make, field: str) -> None:
    with pytest.raises(ConfigError, match=rf"^(\w+: )?{field}: got .*; expected "):
        make()


# ----------------------------------------------------------------------------
# the real Wikipedia sample (outside the repository; skipped when absent)
# ----------------------------------------------------------------------------


@pytest.mark.skipif(not WIKIPEDIA.is_file(), reason=f"{WIKIPEDIA} not present")
def test_real_wikipedia_fit() -> None:
    # the load-speed target (1M lines < 3 s) lives in benchmarks/bench_load.py, not in a timed unit test
    x = read_lengths(WIKIPEDIA)
    assert x.size == 1_000_000
    fit = fit_lognormal_pareto(x, tail_start=4096)
    assert fit.mu == pytest.approx(5.95, abs=0.05)
    assert fit.sigma == pytest.approx(1.26, abs=0.1)
    assert fit.alpha == pytest.approx(1.55, abs=0.2)
    s = summarize(x)
    assert s["mean"] == pytest.approx(1014, abs=1)
    assert s["median"] == 347
    assert s["seq_share_above_4096"] == pytest.approx(0.044, abs=0.001)
    assert s["token_share_above_4096"] == pytest.approx(0.43, abs=0.005)
    assert s["sq_share_above_4096"] == pytest.approx(0.94, abs=0.005)


def test_a_negative_length_is_not_offered_drop_empty(tmp_path: Path) -> None:
    """A negative token count was answered "(pass drop_empty=True to skip empty documents)", which would not skip
    it (drop_empty drops zeros only) and is no option of the CLI: the hint is for a zero length alone."""
    f = tmp_path / "n.txt"
    f.write_text("5\n-5\n")
    with pytest.raises(ConfigError) as exc:
        read_lengths(f)
    assert "got -5" in str(exc.value) and "drop_empty" not in str(exc.value)
    f.write_text("5\n0\n")
    with pytest.raises(ConfigError, match="remove the empty documents"):
        read_lengths(f)
