"""The judge's reference is complete once it holds every point the checks read (juiz.judging.checks)."""

from __future__ import annotations

from juiz.judging.checks import MAX_POINTS, has_every_point, reference_points


def test_a_reference_is_enough_once_its_last_read_point_is_a_complete_line() -> None:
    points = [f"{n}. Point number {n} is stated here." for n in range(1, MAX_POINTS + 2)]
    last_read = "\n".join(points[:MAX_POINTS])
    assert not has_every_point(last_read)  # the last point's line may still grow
    assert has_every_point(last_read + "\n")
    assert has_every_point(last_read + "\n" + points[MAX_POINTS][:6])
    # What the checks read is the same whether the reference stopped there or went on.
    assert reference_points(last_read + "\n") == reference_points("\n".join(points))


def test_short_lines_and_headings_are_not_points_and_do_not_end_a_reference() -> None:
    reply = "Key points:\n\n1. Water boils at 100 degrees.\n2. Yes.\n3. Ice melts at zero degrees.\n"
    assert len(reference_points(reply)) == 2
    assert not has_every_point(reply)


def test_the_reference_request_stops_at_every_point_and_records_nothing_new() -> None:
    import prompts
    from juiz.engines.base import GenerationRequest
    from juiz.judging.checks import CheckJob

    template = prompts.load("answer_relevance", prompts.DEFAULT_VERSIONS["answer_relevance"], "en")
    fields = {"question": "Why is the sky blue?", "context": "[1] Air scatters blue light.", "answer": "Scattering."}
    request = CheckJob.plan(0, "answer_relevance", template, fields).reference_request
    assert request.enough is has_every_point
    # Results record the same sampling (and the result cache the same key) as a reference written to its end.
    unstopped = GenerationRequest(max_tokens=template.reference_max_tokens, logprobs=0)
    assert request == unstopped and request.describe() == unstopped.describe()
