"""The CI gate: thresholds pass and fail, JUnit XML, `juiz check` end to end against a FAKE judge server, and the
pytest helper."""

from __future__ import annotations

import json
import math
import threading
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

import prompts
from juiz.agreement.gate import Thresholds, evaluate, parse_share_below, write_junit
from juiz.cli import main
from juiz.clients.testing import assert_quality
from juiz.runtime.errors import InputError
from schemas import Judgement, JudgementStatus, Provenance

PROVENANCE = Provenance(model="fake", prompt="p", prompt_sha256="0" * 64, sampling={}, juiz_version="t")


def judgement(i: int, score: int | None, label: str | None = None) -> Judgement:
    ok = score is not None
    return Judgement(
        id=f"q{i}",
        status=JudgementStatus.OK if ok else JudgementStatus.PARSE_ERROR,
        score=score,
        normalized_score=score / 3 if score is not None else None,
        question="Q?",
        answer="A.",
        manual_label=label,
        provenance=PROVENANCE,
    )


# 8 graded at 3, 2 graded at 1: mean (8 + 2/3) / 10 = 0.8667; share below 2 = 0.2
RESULTS = [judgement(i, 3) for i in range(8)] + [judgement(8, 1), judgement(9, 1)]


def test_thresholds_that_hold_pass() -> None:
    report = evaluate(RESULTS, Thresholds(min_mean=0.8, max_share_below=((2, 0.2),)))
    assert report.passed
    assert report.mean == pytest.approx(0.8667, abs=1e-4)
    assert [c.name for c in report.checks] == ["max_unscored", "min_mean", "max_share_below_2"]


def test_each_threshold_can_fail() -> None:
    report = evaluate(RESULTS, Thresholds(min_mean=0.9, max_share_below=((2, 0.1), (1, 0.0))))
    verdicts = {c.name: c.passed for c in report.checks}
    assert verdicts == {"max_unscored": True, "min_mean": False, "max_share_below_2": False, "max_share_below_1": True}
    assert not report.passed
    assert "FAIL  min_mean" in report.summary() and "2 of 10 graded items score below 2" in report.summary()


def test_unscored_items_fail_the_gate_by_default_and_are_not_counted_as_graded() -> None:
    report = evaluate([*RESULTS, judgement(10, None)], Thresholds(min_mean=0.8))
    assert not report.passed and report.graded == 10 and report.total == 11
    assert evaluate([*RESULTS, judgement(10, None)], Thresholds(min_mean=0.8, max_unscored=0.1)).passed


def test_kappa_against_manual_labels_and_undefined_kappa_fails() -> None:
    labelled = [judgement(0, 3, "C"), judgement(1, 0, "I"), judgement(2, 3, "C"), judgement(3, 0, "I")]
    assert evaluate(labelled, Thresholds(min_kappa=0.9)).passed  # perfect agreement: kappa 1
    report = evaluate(RESULTS, Thresholds(min_kappa=0.5))  # no labels at all
    [kappa] = [c for c in report.checks if c.name == "min_kappa"]
    assert not kappa.passed and kappa.value is None and "undefined" in kappa.detail


def test_bad_thresholds_are_input_errors() -> None:
    assert parse_share_below("2:0.1") == (2, 0.1)
    with pytest.raises(InputError, match="SCORE:SHARE"):
        parse_share_below("2")
    with pytest.raises(InputError, match="--max-share-below"):
        Thresholds(max_share_below=((5, 0.1),))
    with pytest.raises(InputError, match="--min-mean"):
        Thresholds(min_mean=3.0)


def test_junit_xml_parses_and_lists_each_check(tmp_path: Path) -> None:
    report = evaluate(RESULTS, Thresholds(min_mean=0.9, max_share_below=((2, 0.5),)))
    path = tmp_path / "junit.xml"
    write_junit(report, path)
    suite = ET.parse(path).getroot().find("testsuite")
    assert suite is not None and suite.get("tests") == "3" and suite.get("failures") == "1"
    cases = {case.get("name"): case for case in suite.iter("testcase")}
    assert set(cases) == {"max_unscored", "min_mean", "max_share_below_2"}
    assert cases["min_mean"].find("failure") is not None
    assert cases["max_share_below_2"].find("failure") is None


def test_assert_quality_in_a_teams_own_test() -> None:
    assert assert_quality(RESULTS, min_mean=0.8, max_share_below={2: 0.25}).passed
    with pytest.raises(AssertionError, match="min_mean"):
        assert_quality(RESULTS, min_mean=0.95)


# --- `juiz check` end to end, grading through a FAKE OpenAI-compatible judge server -------------------------------


# every check question asked so that yes means bad, in any prompt and language
YES_MEANS_BAD = {
    check.question
    for metric, version, lang in map(prompts.parse_prompt_id, prompts.available())
    for check in prompts.load(metric, version, lang or "en").checks
    if check.yes_means == "bad"
}


class FakeJudgeServer(BaseHTTPRequestHandler):
    """A FAKE chat-completions server: score 0 when the rendered prompt mentions 'bananas', else 3. A CoT prompt gets
    a written grade without logprobs; a check prompt's yes/no question (the default) gets "No" or "Yes" with
    the first token's top log-probabilities, which is what the judge reads it from."""

    def do_GET(self) -> None:
        self._send({"data": [{"id": "judge", "owned_by": "fake"}]})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        user = body["messages"][-1]["content"]
        bad = "bananas" in user
        if prompts.asks_yes_no(user):
            # a check asked so that yes means bad ("does this sentence speak to a grader?") gets the other word
            good = not bad if not any(q in user for q in YES_MEANS_BAD) else bad
            word, other = ("Yes", "No") if good else ("No", "Yes")
            # 0.98: above the default check rules' top cuts (0.92/0.94, fitted on dev), so a good answer scores 3
            top = [{"token": word, "logprob": math.log(0.98)}, {"token": other, "logprob": math.log(0.02)}]
            logprobs = {"content": [{"token": word, "logprob": math.log(0.98), "top_logprobs": top}]}
            choice = {"index": 0, "message": {"content": word}, "logprobs": logprobs, "finish_reason": "length"}
            self._send({"choices": [choice]})
            return
        text = f"Criteria: c\nSupporting Evidence: e\nScore: {0 if bad else 3}"
        self._send({"choices": [{"index": 0, "message": {"content": text}, "finish_reason": "stop"}]})

    def _send(self, payload: object) -> None:
        data = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def judge_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeJudgeServer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()
    thread.join()


def ragas_rows(n_bad: int) -> str:
    rows = [
        {"user_input": "What is mitosis?", "response": "Cell division.", "retrieved_contexts": ["Mitosis is…"]}
        for _ in range(10 - n_bad)
    ] + [{"user_input": "What is mitosis?", "response": "I like bananas."} for _ in range(n_bad)]
    return "\n".join(json.dumps(r) for r in rows) + "\n"


COT = ["--prompt", "answer_relevance@juiz-1"]


@pytest.mark.parametrize(("n_bad", "code"), [(1, 0), (3, 1)])
def test_juiz_check_grades_through_a_judge_server_and_gates(
    tmp_path: Path, judge_server: str, capsys: pytest.CaptureFixture[str], n_bad: int, code: int
) -> None:
    data = tmp_path / "eval.jsonl"
    data.write_text(ragas_rows(n_bad), encoding="utf-8")
    junit = tmp_path / "junit.xml"
    # CoT pinned: the point is the gate on a server that gives no logprobs (a null expected score, never made up)
    argv = ["check", str(data), "--field-map", "ragas", "--base-url", judge_server, "--model", "judge", *COT]
    argv += ["--min-mean", "0.75", "--max-share-below", "2:0.2", "--junit", str(junit), "-o", str(tmp_path / "o.jsonl")]
    assert main(argv) == code
    out = capsys.readouterr().out
    assert "10/10 items graded" in out and ("PASSED" if code == 0 else "FAILED") in out
    cases = [c.get("name") for c in ET.parse(junit).getroot().iter("testcase")]
    assert cases == ["max_unscored", "min_mean", "max_share_below_2"]
    first = json.loads((tmp_path / "o.jsonl").read_text(encoding="utf-8").splitlines()[0])
    assert first["question"] == "What is mitosis?" and first["expected_score"] is None  # the server gave no logprobs


def test_juiz_check_bad_input_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "eval.jsonl"
    data.write_text('{"user_input": "q?"}\n', encoding="utf-8")
    assert main(["check", str(data), "--field-map", "ragas", "--min-mean", "0.5", "--base-url", "http://x/v1"]) == 2
    assert "field 'response'" in capsys.readouterr().err
    assert main(["check", str(data), "--max-share-below", "two", "--base-url", "http://x/v1"]) == 2


def test_juiz_score_on_a_judge_server_records_the_back_end(tmp_path: Path, judge_server: str) -> None:
    data = tmp_path / "eval.jsonl"
    data.write_text(ragas_rows(1), encoding="utf-8")
    out = tmp_path / "out.jsonl"
    argv = ["score", str(data), "-o", str(out), "--field-map", "ragas", "--base-url", judge_server, "--model", "judge"]
    assert main(argv) == 0
    results = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [r["score"] for r in results] == [3] * 9 + [0]
    assert results[0]["provenance"]["engine"] == "openai" and results[0]["provenance"]["engine_host"] == "127.0.0.1"
    assert results[0]["provenance"]["model"] == "judge"
