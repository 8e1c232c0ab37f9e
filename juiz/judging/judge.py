"""The judge: triples in, judgements out, every item and metric of a run in one batched engine call per setting.

render (prompts) → generate (engine, one call per sampling setting) → parse (parsing) → judgement (schemas).
The CLI and the benchmarks grade through `Judge.grade_many`; the service's workers through `grade_unfinished`, to
finish their results together with their cache hits.

Several metrics per item: answer_relevance (question + answer), groundedness (context + question + answer)
and context_relevance (question + one segment, for each segment). Every (item, metric[, segment]) is one
conversation; conversations with the same sampling setting go to the engine together, and identical conversations
(e.g. the same question's segments for several answers) are generated once. The top-level fields of a result repeat
answer_relevance when it was requested, else the first requested metric; `metrics` holds each one.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from juiz.engines.base import CANCELLED, CallControl, Completion, Conversation, GenerationRequest, JudgeEngine, aborted
from juiz.judging.checks import CHECK_REQUEST, REFERENCE_ASKS, Ask, CheckJob, read_check, reference_text
from juiz.judging.judgements import finished, judgement_of
from juiz.judging.metric_results import checks_result, parsed_fields, rounded, sampled_fields
from juiz.judging.passages import numbered, within_budget
from juiz.judging.plan import COT_REQUEST, FAST_REQUEST, SEGMENT_COT_REQUEST, ItemPlan, plan_item, shows_context
from juiz.judging.probe import Probe, StateReader, claims_of, read_support, verified
from juiz.judging.progress import PROMPT_CHARS, REPLY_CHARS, Progress
from juiz.runtime.errors import EngineDeadError, JuizError, TransientEngineError
from schemas import BatchOptions, Judgement, Provenance, Segment, Triple
from schemas.judgement import NEEDS_CONTEXT, CheckResult, MetricResult, MetricStatus, SegmentGrade

log = logging.getLogger(__name__)

# How context_relevance's item score comes from its segments' scores (docs/explanation/judge.md, "Metrics").
CONTEXT_AGGREGATE = "max"
# What a check prompt shows as the context of an item that has none (answer relevance needs none).
NO_CONTEXT = "(none)"


def context_segments(context: str | list[Segment] | None) -> list[str]:
    """The context's segment texts; a plain-text context is one segment; blank ones are left out."""
    if context is None:
        return []
    if isinstance(context, str):
        return [context] if context.strip() else []
    return [s.text for s in context if s.text.strip()]


class Interjection(Protocol):
    """Other work that goes ahead of a long grading, between its engine calls ("waves").

    `take()` is asked before each call and, from the engine's cancel poll, while a call runs; when it says yes (it
    has taken work for this grading to do first), a running call is cut: its unfinished conversations are aborted and
    sent again afterwards, the finished ones kept. `serve()` then grades what was taken, and the grading goes on. So
    a small batch that arrives behind a long grading waits one poll, not the rest of the call."""

    def take(self) -> bool: ...

    def serve(self) -> None: ...


def shown_context(triple: Triple, segments: list[str], budget_chars: int | None) -> str:
    """The context as the judge is shown it: numbered segments, cut to the budget by what the question is about
    (juiz.judging.passages). Not by the answer: the judge's reference is written from this context without the
    answer, and every answer to a question shares its prefix and its reference; a sentence's own passage, for the
    support checks, is chosen from every segment."""
    if not segments:
        return NO_CONTEXT
    return numbered(segments, within_budget(segments, [triple.question], budget_chars))


@dataclass(frozen=True)
class _Task:
    """One conversation to generate: item `item`'s grade for `metric` (and one segment for context relevance)."""

    item: int
    metric: str
    segment: int | None
    conversation: Conversation
    request: GenerationRequest
    # What the metric's result records (its plan's); None for a check's or a reference's conversation, whose
    # metric's result is made from all of them (`_grade_checks`).
    provenance: Provenance | None


@dataclass(frozen=True)
class _Reply:
    completion: Completion
    latency_s: float


@dataclass
class Judge:
    engine: JudgeEngine
    # The judge model in transformers, for options.verifier: loaded on the first batch that asks, kept per layer read.
    _readers: dict[tuple[str, int | None], StateReader] = field(default_factory=dict, init=False, repr=False)

    def warm_up(self) -> float:
        """Compile the reply grammars before real work: xgrammar builds its token masks once per engine (seconds on a
        CPU, more under load), and vLLM drops requests whose grammar takes longer than its compile timeout."""
        started = time.perf_counter()
        conversation = [{"role": "user", "content": "Warm-up."}]
        for request in (COT_REQUEST, SEGMENT_COT_REQUEST, FAST_REQUEST):
            self.engine.generate([conversation], replace(request, max_tokens=1))
        return time.perf_counter() - started

    def grade(
        self, triples: Sequence[Triple], options: BatchOptions | None = None, progress: Progress | None = None
    ) -> list[Judgement]:
        options = options or BatchOptions()
        return self.grade_many([(t, options) for t in triples], progress=progress)

    def grade_many(
        self,
        items: Sequence[tuple[Triple, BatchOptions]],
        control: CallControl | None = None,
        plans: Sequence[ItemPlan | None] | None = None,
        progress: Progress | None = None,
    ) -> list[Judgement]:
        """Grade items that may carry different options (e.g. chunks of several batches) in as few calls as possible.

        Prompts differ per item and metric, so they still share one call; only a different sampling setting (cot,
        the shorter per-segment cot, fast) needs a call of its own. `control.cancelled()` names ITEM indices.
        `plans`: each item's `plan_item`, when the caller made it already; an item without one is planned here,
        before anything else. Each result is `finished` with its batch's label mapping and calibration. `progress`
        (one per call, sized to `items`) is kept up to date, conversation by conversation (juiz.judging.progress).
        """
        graded = self.grade_unfinished(items, control, plans, progress)
        return [finished(judgement, options) for judgement, (_, options) in zip(graded, items, strict=True)]

    def grade_unfinished(
        self,
        items: Sequence[tuple[Triple, BatchOptions]],
        control: CallControl | None = None,
        plans: Sequence[ItemPlan | None] | None = None,
        progress: Progress | None = None,
        interject: Interjection | None = None,
    ) -> list[Judgement]:
        """`grade_many`, its results not yet `finished`: for a caller that finishes them together with results of
        other origins (the worker: cache hits), in one place. `interject`: other work let in between (and into) its
        engine calls (`Interjection`)."""
        planned = [
            plan if plan is not None else plan_item(options, triple.question, self.engine)
            for (triple, options), plan in zip(items, plans or [None] * len(items), strict=True)
        ]
        tasks, jobs, skipped = self._tasks(items, planned)
        _plan_progress(progress, len(items), tasks, jobs)
        # The verifier's reading of an item counts as one conversation more, weighed by the text it reads: it comes
        # after the engine's work and can take seconds an item, which a progress line should show moving.
        verifying = {
            i: sum(map(len, segments)) + len(triple.answer)
            for i, (triple, options) in enumerate(items)
            if options.verifier is not None
            and "groundedness" in options.metrics
            and (segments := context_segments(triple.context))
        }
        if progress is not None and verifying:
            progress.plan(list(verifying), work=list(verifying.values()))
        replies = self._run(tasks, control, progress, interject)
        by_item: list[dict[str, MetricResult]] = [dict(skipped.get(i, {})) for i in range(len(items))]
        for (item, metric), result in self._grade_checks(jobs, control, progress, interject).items():
            by_item[item][metric] = result
        segment_grades: dict[tuple[int, str], list[tuple[_Task, _Reply]]] = {}
        for task, reply in zip(tasks, replies, strict=True):
            if task.segment is None:
                by_item[task.item][task.metric] = _metric_result(task, reply)
            else:
                segment_grades.setdefault((task.item, task.metric), []).append((task, reply))
        for (item, metric), graded in segment_grades.items():
            by_item[item][metric] = _context_relevance(graded)
        for i, work in verifying.items():
            triple, options = items[i]
            grounded = by_item[i].get("groundedness")
            if grounded is not None and grounded.status is MetricStatus.OK:
                by_item[i]["groundedness"] = self._verified(triple, options, grounded)
            if progress is not None:
                progress.finish([i], work=[work])
        return [
            judgement_of(triple, options, {m: by_item[i][m] for m in options.metrics})
            for i, (triple, options) in enumerate(items)
        ]

    def _verified(self, triple: Triple, options: BatchOptions, grounded: MetricResult) -> MetricResult:
        """Groundedness read again by the batch's verifier (juiz.judging.probe): every sentence of the answer beside
        the item's context. A verifier that can't read makes the metric failed, with the reason: never the judge's
        grade passed off as verified."""
        assert options.verifier is not None
        claims = claims_of(triple.answer)
        if not claims:
            return grounded
        try:
            probe = Probe.from_spec(options.verifier)
            started = time.perf_counter()
            support = read_support(self._reader(probe), probe, context_segments(triple.context), claims)
        except (JuizError, ValueError, OSError, RuntimeError) as exc:  # e.g. the model never pulled, out of memory
            return grounded.model_copy(
                update={
                    "status": MetricStatus.FAILED,
                    "score": None,
                    "normalized_score": None,
                    "expected_score": None,
                    "error": f"verifier {options.verifier.version}: {exc}",
                }
            )
        log.debug("verifier read %d sentence(s) of %s in %.1fs", len(claims), triple.id, time.perf_counter() - started)
        return verified(grounded, claims, support, probe.cut)

    def _reader(self, probe: Probe) -> StateReader:
        key = (probe.model, probe.layer)
        if key not in self._readers:
            from juiz.engines.cpu import native_bf16
            from juiz.engines.models import resolve_model

            layers = () if probe.layer is None else (probe.layer,)
            # bf16 where the CPU computes it natively; emulated bf16 is several times slower than float32.
            dtype = "bfloat16" if native_bf16() else "float32"
            self._readers[key] = StateReader(resolve_model(probe.model), layers, dtype=dtype)
        return self._readers[key]

    def _tasks(
        self, items: Sequence[tuple[Triple, BatchOptions]], plans: Sequence[ItemPlan]
    ) -> tuple[list[_Task], list[tuple[CheckJob, Provenance]], dict[int, dict[str, MetricResult]]]:
        """The conversations each item's plan asks for; a check-based metric's go to juiz.judging.checks."""
        tasks: list[_Task] = []
        jobs: list[tuple[CheckJob, Provenance]] = []
        skipped: dict[int, dict[str, MetricResult]] = {}
        for i, ((triple, options), plan) in enumerate(zip(items, plans, strict=True)):
            segments = context_segments(triple.context)
            for metric, chosen in plan.items():
                template, request = chosen.template, chosen.request
                if metric in NEEDS_CONTEXT and not segments:
                    skipped.setdefault(i, {})[metric] = MetricResult(
                        status=MetricStatus.SKIPPED,
                        error=f"{metric} needs a context and this item has none",
                        provenance=chosen.provenance,
                    )
                    continue
                if metric == "context_relevance":
                    for n, text in enumerate(segments):
                        conversation = template.render(question=triple.question, segment=text, mode=options.mode)
                        tasks.append(_Task(i, metric, n, conversation, request, chosen.provenance))
                    continue
                fields = {"question": triple.question, "answer": triple.answer}
                if shows_context(metric, template):
                    # Check prompts of every metric show the same item (the context too), so one cached prefix serves
                    # all of an item's checks, whatever the metric.
                    fields["context"] = shown_context(triple, segments, options.context_chars)
                if template.kind == "checks":
                    job = CheckJob.plan(i, metric, template, fields, segments, chosen.info_checks)
                    jobs.append((job, chosen.provenance))
                    continue
                conversation = template.render(mode=options.mode, **fields)
                tasks.append(_Task(i, metric, None, conversation, request, chosen.provenance))
        return tasks, jobs, skipped

    def _grade_checks(
        self,
        planned_jobs: list[tuple[CheckJob, Provenance]],
        control: CallControl | None,
        progress: Progress | None = None,
        interject: Interjection | None = None,
    ) -> dict[tuple[int, str], MetricResult]:
        """Check-based metrics in two engine calls (juiz.judging.checks): the references, then every check, each
        distinct prefix's first check ahead of the rest."""
        if not planned_jobs:
            return {}
        started = time.perf_counter()
        jobs = [job for job, _ in planned_jobs]
        with_reference = [job for job in jobs if job.needs_reference]
        reference_replies = self._run(
            [
                _Task(job.item, job.metric, None, job.reference_conversation(), job.reference_request, None)
                for job in with_reference
            ],
            control,
            progress,
            interject,
        )
        references = {id(job): reply.completion for job, reply in zip(with_reference, reference_replies, strict=True)}
        planned: list[tuple[CheckJob, list[Ask], list[CheckResult]]] = []
        for job in jobs:
            reference = references.get(id(job))
            if reference is None:
                asks, unasked = job.asks(None)
            else:  # a reference that could not be written fails its checks with the reason (e.g. cancelled)
                asks, unasked = job.asks(reference_text(reference), reference.error or "no reference answer")
            planned.append((job, asks, unasked))
        if progress is not None:
            # The checks asked of a reference are known now: what `_plan_progress` could not count ahead.
            more = [(job.item, ask) for job, asks, _ in planned for ask in _asked_of_reference(asks)]
            progress.plan(
                (item for item, _ in more),
                close={job.item for job, _, _ in planned},
                work=[progress.work(ask.conversation, CHECK_REQUEST.max_tokens) for _, ask in more],
            )
        # One check per distinct prefix goes first (an item's; a check's own worked examples, shared by every item),
        # so the prefix is cached before the checks sharing it are scheduled; an item whose reference was written under
        # the prompt's own system message has its prefix cached already (one under a system message of its own has not).
        # Firsts and the rest go in one call, the firsts at its head: the engine schedules in the order sent, so the
        # firsts' prefixes are computed before the rest are scheduled (a step's token budget admits a few requests at
        # a time) without a second call's barrier, which also let a cache drop what the first call computed
        # (bench.tokens: computed prompt tokens per item, per-call and whole-run cache models).
        first: list[tuple[int, int]] = []
        prefixes: set[tuple[object, ...]] = set()
        for n, (job, asks, _) in enumerate(planned):
            for k, ask in enumerate(asks):
                if ask.prefix_key in prefixes:
                    continue
                prefixes.add(ask.prefix_key)
                if not (job.reference_shares_prefix and ask.prefix_key == job.prefix_key):
                    first.append((n, k))
        first_set = set(first)
        rest = [(n, k) for n, (_, asks, _) in enumerate(planned) for k in range(len(asks)) if (n, k) not in first_set]
        # The rest grouped by prefix (each item's own checks together; every item's sentences under one check's worked
        # examples together), items in order within a group: a cache that keeps one prompt per slot (llama.cpp) then
        # serves the shared prefix from the prompt before, instead of losing it to a check with other examples.
        group = {key: g for g, key in enumerate(dict.fromkeys(planned[n][1][k].prefix_key for n, k in rest))}
        rest.sort(key=lambda nk: group[planned[nk[0]][1][nk[1]].prefix_key])
        order = first + rest
        replies = self._run(
            [
                _Task(
                    planned[n][0].item, planned[n][0].metric, None, planned[n][1][k].conversation, CHECK_REQUEST, None
                )
                for n, k in order
            ],
            control,
            progress,
            interject,
        )
        read = {(n, k): read_check(planned[n][1][k], r.completion) for (n, k), r in zip(order, replies, strict=True)}
        latency = round(time.perf_counter() - started, 4)
        results: dict[tuple[int, str], MetricResult] = {}
        for n, ((job, asks, unasked), (_, provenance)) in enumerate(zip(planned, planned_jobs, strict=True)):
            checks = [read[(n, k)] for k in range(len(asks))] + unasked
            reference = references.get(id(job))
            results[(job.item, job.metric)] = checks_result(
                job, checks, reference_text(reference) if reference is not None else None, latency, provenance
            )
        return results

    def _run(
        self,
        tasks: list[_Task],
        control: CallControl | None,
        progress: Progress | None = None,
        interject: Interjection | None = None,
    ) -> list[_Reply]:
        """One engine call per sampling setting; identical conversations in it are generated once. `progress` hears
        of each conversation as the engine finishes it (once per task it serves). With `interject`, a call may be cut
        for other work (`Interjection`); what it left unfinished is sent again once that work is done."""
        replies: list[_Reply | None] = [None] * len(tasks)
        for request in dict.fromkeys(t.request for t in tasks):
            unique: dict[str, int] = {}  # rendered conversation → position in this call
            conversations: list[Conversation] = []
            owners: list[set[int]] = []  # items each conversation serves
            slots: list[tuple[int, int]] = []  # (task index, position in this call)
            for index, task in enumerate(tasks):
                if task.request != request:
                    continue
                key = json.dumps(task.conversation, ensure_ascii=False)
                if key not in unique:
                    unique[key] = len(conversations)
                    conversations.append(task.conversation)
                    owners.append(set())
                owners[unique[key]].add(task.item)
                slots.append((index, unique[key]))
            completions = [aborted(CANCELLED)] * len(conversations)
            started = time.perf_counter()
            report = _Report(progress, slots, tasks)
            send = _still_wanted(control, owners, range(len(conversations)))
            sending = set(send)
            report.positions(p for p in range(len(conversations)) if p not in sending)  # not sent: over already
            while send:
                if interject is not None and interject.take():
                    interject.serve()  # between two calls: the other work goes first
                cut = _Cut(interject)
                engine_control = _engine_control(control, [owners[p] for p in send])
                if progress is not None:
                    engine_control = replace(
                        engine_control or CallControl(),
                        on_finished=cut.unless_cut(report, send),
                        on_tokens=report.tokens_of_call(send),
                    )
                engine_control = cut.control(engine_control, len(send))
                sent = self._generate_isolating_failures([conversations[p] for p in send], request, engine_control)
                for p, completion in zip(send, sent, strict=True):
                    completions[p] = completion
                again = cut.aborted(send, sent)
                # What was cut goes again, less what its batch cancelled meanwhile; the rest is over.
                send = _still_wanted(control, owners, again)
                report.positions(p for p in sending if p not in set(send))
                sending = set(send)
                if cut.done:  # what was taken is served now, even if the call had finished when it was cut
                    assert interject is not None
                    interject.serve()
            latency = time.perf_counter() - started
            for index, position in slots:
                replies[index] = _Reply(completions[position], latency)
        return [r for r in replies if r is not None]

    def _generate_isolating_failures(
        self, conversations: list[Conversation], request: GenerationRequest, control: CallControl | None = None
    ) -> list[Completion]:
        """One batched call; if the engine rejects the batch, split it to find and fail only the bad items.

        Any exception is taken as "some item in here was rejected" (vLLM raises e.g. VLLMValidationError from
        VLLMError(Exception)) except those about the call as a whole, which propagate: a transient fault (the worker
        retries the chunk later), a dead engine, a job timeout. An error text lands only in the result of the one
        item that caused it, never in its call-mates' (they may be another tenant's).
        """
        try:
            return self.engine.generate(conversations, request, control)
        except Exception as exc:
            _raise_if_call_level(exc)
            if len(conversations) == 1:
                log.warning("engine rejected one item: %s", exc)
                return [Completion(text="", error=f"{type(exc).__name__}: {exc}")]
            half = len(conversations) // 2
            log.warning(
                "engine rejected a batch of %d (%s); splitting to isolate the bad item", len(conversations), exc
            )
            return self._generate_isolating_failures(
                conversations[:half], request, _shifted(control, 0, half)
            ) + self._generate_isolating_failures(
                conversations[half:], request, _shifted(control, half, len(conversations))
            )


def _raise_if_call_level(exc: Exception) -> None:
    """Re-raise an exception about the whole call rather than one item in it; vLLM's dead engine as juiz's.

    vLLM and RQ are looked up only if already imported: an exception can't be theirs otherwise, and the judge
    imports neither.
    """
    if isinstance(exc, (TransientEngineError, EngineDeadError)):
        raise exc
    # Infrastructure faults (a socket, a timeout, Redis restarting under an engine that uses it) say nothing about
    # the items: the worker sends the chunk back to the queue (bounded retries) instead of failing them for good.
    redis_errors = sys.modules.get("redis.exceptions")
    transient: tuple[type[BaseException], ...] = (OSError, TimeoutError)
    if redis_errors is not None:
        transient += (redis_errors.ConnectionError, redis_errors.TimeoutError)
    if isinstance(exc, transient):
        raise TransientEngineError(f"{type(exc).__name__}: {exc}") from exc
    vllm_errors = sys.modules.get("vllm.v1.engine.exceptions")
    if vllm_errors is not None and isinstance(exc, vllm_errors.EngineDeadError):
        raise EngineDeadError(f"the vLLM engine died: {exc}") from exc
    rq_timeouts = sys.modules.get("rq.timeouts")
    if rq_timeouts is not None and isinstance(exc, rq_timeouts.BaseTimeoutException):
        raise exc  # the job's time is up (SIGALRM): splitting would run on past it


def _still_wanted(control: CallControl | None, owners: list[set[int]], positions: Iterable[int]) -> list[int]:
    """The positions to send: work whose every item was cancelled (before the call, or while a call was cut) is not
    sent; it comes back aborted, as if cancelled during the call."""
    gone = set(control.cancelled()) if control is not None and control.cancelled is not None else set()
    return [p for p in positions if not (owners[p] and owners[p] <= gone)]


class _Cut:
    """One engine call that `interject` may cut: the engine's cancel poll asks `interject.take()` too; once it said
    yes, every conversation of the call not yet finished is aborted (the engine keeps those it finished)."""

    def __init__(self, interject: Interjection | None) -> None:
        self.interject = interject
        self.done = False

    def control(self, control: CallControl | None, n: int) -> CallControl | None:
        interject = self.interject
        if interject is None:
            return control
        control = control or CallControl()
        asked = control.cancelled

        def cancelled() -> Collection[int]:
            if not self.done and interject.take():
                self.done = True
            if self.done:
                return range(n)
            return asked() if asked is not None else ()

        return replace(control, cancelled=cancelled)

    def unless_cut(self, report: _Report, send: list[int]) -> Callable[[int], None]:
        """`on_finished` that reports only before the cut: after it, the engine reports aborts, to be sent again."""
        told = report.of_call(send)
        return lambda index: None if self.done else told(index)

    def aborted(self, send: list[int], sent: list[Completion]) -> list[int]:
        """The positions this cut aborted (none if it never cut): to send again."""
        if not self.done:
            return []
        return [p for p, completion in zip(send, sent, strict=True) if completion.error == CANCELLED]


def _engine_control(control: CallControl | None, owners: list[set[int]]) -> CallControl | None:
    """The item-level control as one engine call sees it: a conversation is cancelled once every item it serves is."""
    if control is None or control.cancelled is None:
        return control
    item_cancelled = control.cancelled

    def cancelled() -> Collection[int]:
        gone = set(item_cancelled())
        return [position for position, items in enumerate(owners) if items and items <= gone] if gone else []

    return replace(control, cancelled=cancelled)


def _shifted(control: CallControl | None, start: int, stop: int) -> CallControl | None:
    """The control for conversations[start:stop] of a call, re-indexed from 0."""
    if control is None:
        return control
    if control.on_finished is not None:
        told = control.on_finished
        control = replace(control, on_finished=lambda i: told(i + start))
    if control.on_tokens is not None:
        grew = control.on_tokens
        control = replace(control, on_tokens=lambda i, written, read: grew(i + start, written, read))
    if control.cancelled is None:
        return control
    call_cancelled = control.cancelled

    def cancelled() -> Collection[int]:
        return [i - start for i in call_cancelled() if start <= i < stop]

    return replace(control, cancelled=cancelled)


class _Report:
    """One engine call's finished conversations → `Progress`, each position once (a batch split after a rejection
    sends some again)."""

    def __init__(self, progress: Progress | None, slots: list[tuple[int, int]], tasks: list[_Task]) -> None:
        self.progress = progress
        self.items: dict[int, list[int]] = {}  # position → the item of each task it serves
        self.work: dict[int, int] = {}  # position → its conversation's work, as planned (Progress.work)
        self.credited: dict[int, int] = {}  # position → the part of it its tokens counted as done before it finished
        for index, position in slots:
            self.items.setdefault(position, []).append(tasks[index].item)
            if progress is not None and position not in self.work:
                task = tasks[index]
                self.work[position] = progress.work(task.conversation, _reply_allowance(task.request))
        self.reported: set[int] = set()

    def of_call(self, send: list[int]) -> Callable[[int], None]:
        """`on_finished` for an engine call over the conversations at positions `send`."""
        return lambda index: self.positions([send[index]])

    def tokens_of_call(self, send: list[int]) -> Callable[[int, int, int], None]:
        """`on_tokens` for an engine call over the conversations at positions `send`: each item it serves hears them."""

        def grew(index: int, written: int, read: int) -> None:
            if self.progress is not None:
                position = send[index]
                credited = self.credited.get(position, 0)
                tokens = read * PROMPT_CHARS + written * REPLY_CHARS
                credit = max(0, min(self.work.get(position, 0), credited + tokens) - credited)
                self.credited[position] = credited + credit
                self.progress.tokens(self.items.get(position, []), written, read, work=credit)

        return grew

    def positions(self, positions: Iterable[int]) -> None:
        if self.progress is None:
            return
        fresh = [p for p in positions if p not in self.reported]
        if fresh:
            self.reported.update(fresh)
            rest = {p: self.work.get(p, 0) - self.credited.get(p, 0) for p in fresh}
            served = [(item, rest[p]) for p in fresh for item in self.items.get(p, [])]
            self.progress.finish((item for item, _ in served), work=[work for _, work in served])


def _plan_progress(
    progress: Progress | None, n_items: int, tasks: list[_Task], jobs: list[tuple[CheckJob, Provenance]]
) -> None:
    """Plan what can be counted before the first engine call: every score conversation, every reference, and every
    check that needs no reference, each weighed in the order the engine gets them (a reference computes the prefix
    its item's checks share). Items whose checks wait on a reference stay open; the rest of their checks are planned
    once the references are written (`_asked_of_reference`)."""
    if progress is None:
        return
    planned = [(task.item, task.conversation, _reply_allowance(task.request)) for task in tasks]
    planned += [
        (job.item, job.reference_conversation(), _reply_allowance(job.reference_request))
        for job, _ in jobs
        if job.needs_reference
    ]
    for job, _ in jobs:
        planned += [(job.item, ask.conversation, CHECK_REQUEST.max_tokens) for ask in job.asks(None)[0]]
    waiting = {job.item for job, _ in jobs}  # their checks are planned in _grade_checks, after the references
    progress.plan(
        (item for item, _, _ in planned),
        close=[i for i in range(n_items) if i not in waiting],
        work=[progress.work(conversation, tokens) for _, conversation, tokens in planned],
    )


def _asked_of_reference(asks: list[Ask]) -> list[Ask]:
    """The asks `_plan_progress` could not plan: those made of the judge's reference (with it, or of its points)."""
    return [ask for ask in asks if ask.check.ask in REFERENCE_ASKS]


def _reply_allowance(request: GenerationRequest) -> int:
    """The reply tokens a request may write: its maximum, for each reply it draws."""
    return request.max_tokens * max(request.n, 1)


def _metric_result(task: _Task, reply: _Reply) -> MetricResult:
    return MetricResult(
        **sampled_fields(reply.completion, task.request),
        latency_s=round(reply.latency_s, 4),
        provenance=task.provenance,
    )


def _context_relevance(graded: list[tuple[_Task, _Reply]]) -> MetricResult:
    """Per-segment grades and their aggregate: the best segment's score (see CONTEXT_AGGREGATE).

    The max answers "does the context hold what the question needs", which is what makes a grounded answer possible;
    retrievers return a fixed number of segments, so a mean would mostly measure how many distractors k lets in (it
    is reported too, as `mean_score`). A segment that failed or did not parse makes the aggregate unknown unless an
    ok segment already scores 3.
    """
    task = graded[0][0]
    segments = [
        SegmentGrade(index=t.segment if t.segment is not None else 0, **parsed_fields(r.completion, t.request))
        for t, r in graded
    ]
    common: dict[str, Any] = {
        "latency_s": round(max(r.latency_s for _, r in graded), 4),
        "provenance": task.provenance,
        "segments": segments,
        "aggregate": CONTEXT_AGGREGATE,
    }
    ok = [s for s in segments if s.status is MetricStatus.OK and s.score is not None]
    bad = [s for s in segments if s.status is not MetricStatus.OK]
    best = max(ok, key=lambda s: (s.score or 0, s.expected_score or 0.0), default=None)
    if bad and (best is None or best.score != 3):
        status = MetricStatus.FAILED if all(s.status is MetricStatus.FAILED for s in bad) else MetricStatus.PARSE_ERROR
        reasons = "; ".join(f"segment {s.index + 1}: {s.error}" for s in bad[:3])
        return MetricResult(
            status=status, error=f"{len(bad)} of {len(segments)} segments not graded ({reasons})", **common
        )
    assert best is not None and best.score is not None
    relevant = [str(s.index + 1) for s in ok if (s.score or 0) >= 2]
    expected = [s.expected_score for s in ok if s.expected_score is not None]
    return MetricResult(
        status=MetricStatus.OK,
        score=best.score,
        normalized_score=round(best.score / 3, 6),
        expected_score=rounded(max(expected)) if len(expected) == len(ok) else None,
        mean_score=rounded(sum(s.score or 0 for s in ok) / 3 / len(ok)),
        criteria=f"the best of {len(segments)} segments ({CONTEXT_AGGREGATE})",
        supporting_evidence=(
            f"segments scoring 2 or more: {', '.join(relevant)}" if relevant else "no segment scores 2 or more"
        ),
        **common,
    )
