"""Each yes/no check on its own against the manual labels: may it veto, and how much does it carry?

Reads the results `bench.judge_quality --save-judgements` wrote for a split (bench/work/judgements/<split>_<cell>.jsonl)
and prints, per check: how often it was read (not low mass), its mean P(yes) per manual class, Spearman ρ with the
class, ROC AUC for "C vs rest" and for "not I vs I". A check whose ρ is negative is inverted (the judge says yes to
it for worse answers): it must not veto. This is how the rule's vetoes were chosen on the dev split (README, "Judge
quality"); never on test.

    .venv/bin/python -m bench.check_report [--split dev] [--cell checks]
"""

from __future__ import annotations

import argparse
import statistics
from collections import defaultdict

from bench.common import WORK, table
from bench.judge_quality import CLASSES, _auc, _spearman
from juiz.calibration import check_feature
from schemas import Judgement
from schemas.judgement import MetricStatus


def load(split: str, cell: str) -> list[Judgement]:
    path = WORK / "judgements" / f"{split}_{cell}.jsonl"
    return [Judgement.model_validate_json(line) for line in path.read_text(encoding="utf-8").splitlines()]


def rows(results: list[Judgement]) -> list[list[object]]:
    out = []
    names: dict[tuple[str, str], str] = {}
    for r in results:
        for metric, m in (r.metrics or {}).items():
            for c in m.checks or []:
                names.setdefault((metric, c.name), c.role)
    for (metric, name), role in names.items():
        labels, values, by_class = [], [], defaultdict(list)
        unread = 0
        for r in results:
            m = (r.metrics or {}).get(metric)
            if m is None or m.status is not MetricStatus.OK or r.manual_label is None:
                continue
            value = check_feature(m, name)
            if value is None:
                unread += 1
                continue
            label = CLASSES[str(r.manual_label)]
            labels.append(label)
            values.append(value)
            by_class[label].append(value)
        means = [round(statistics.fmean(by_class[k]), 2) if by_class[k] else "-" for k in (0, 1, 2)]
        out.append(
            [
                metric,
                name,
                role,
                len(values),
                unread,
                *means,
                _spearman([float(v) for v in labels], values),
                _auc([int(y == 2) for y in labels], values),
                _auc([int(y > 0) for y in labels], values),
            ]
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", default="dev")
    parser.add_argument("--cell", default="checks")
    args = parser.parse_args(argv)
    header = ["metric", "check", "role", "n", "unread", "P I", "P P", "P C", "ρ", "AUC C", "AUC ¬I"]
    print(table(rows(load(args.split, args.cell)), header))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
