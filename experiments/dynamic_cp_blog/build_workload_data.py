"""Build the real-length workload data shipped in dcpsim/workload/data/ (run once; outputs are committed).

    python experiments/dynamic_cp_blog/build_workload_data.py \
        --github ../shared/data/github_code_files_lengths.txt \
        --wikipedia ../shared/data/wikipedia_lengths.txt

Writes ``github_code_files_lengths.npy`` (the 66,329 lengths, int32, file order) and
``wikipedia_log_quantiles.txt`` (quantiles of ln(length) of the 1,000,000 Wikipedia
lengths at 2,383 probabilities: every 0.0005 up to 0.99, then 1 - 10^-x for x from 2
to 6 in steps of 0.01, and the maximum). See dcpsim/workload/data/README.md.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parents[2] / "dcpsim" / "workload" / "data"


def quantile_grid() -> np.ndarray:
    body = np.linspace(0.0, 0.99, 1981)
    tail = 1.0 - 10.0 ** -np.linspace(2.0, 6.0, 401)
    return np.unique(np.concatenate([body, tail, [1.0]]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--github", required=True)
    ap.add_argument("--wikipedia", required=True)
    a = ap.parse_args()
    gh = np.loadtxt(a.github, dtype=np.int64)
    assert gh.size == 66329 and gh.min() >= 1
    np.save(OUT / "github_code_files_lengths.npy", gh.astype(np.int32))
    wk = np.loadtxt(a.wikipedia, dtype=np.int64)
    assert wk.size == 1_000_000 and wk.min() >= 1
    p = quantile_grid()
    q = np.quantile(np.log(wk.astype(np.float64)), p, method="linear")
    lines = ["# probability  ln(tokens)  -- quantiles of ln(length) of 1,000,000 tokenised English Wikipedia documents",
             "# (FlexSP, Hetu-Galvatron 'flexsp' branch, galvatron/datasets/wikipedia.txt, Apache-2.0); see README.md"]
    lines += [f"{pi:.8f} {qi:.6f}" for pi, qi in zip(p, q, strict=True)]
    (OUT / "wikipedia_log_quantiles.txt").write_text("\n".join(lines) + "\n")
    print(f"github: {gh.size} lengths, mean {gh.mean():.1f}; wikipedia: {p.size} quantiles, data mean {wk.mean():.1f}")


if __name__ == "__main__":
    main()
