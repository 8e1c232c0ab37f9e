"""A check-based grade told in words, in the item's language (English or Portuguese), for a reader who never saw the
code: what the judge was asked, and the facts that decided the score (which veto fired and on which sentence, which
key point of the context the answer states least, which sentence the context supports least), ending on the score.

Built from the same checks and rule outcome as the score (juiz.judging.check_rule), so it cannot contradict it; the
numbers stay in `metrics.<name>.checks`. No check identifier or rule version appears in the text: a check the tables
below do not know is named by its own question, as its prompt file words it in the item's language.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import prompts
from juiz.judging.check_rule import RuleOutcome, baseline_gap, check_values, read_value, veto_values
from schemas.judgement import CheckResult, CheckStatus
from schemas.labels import VerdictLevel

QUOTE_MAX_CHARS = 120

# What a good answer does, by check: (English, Portuguese). Read as "whether the answer …" / "se a resposta …".
GOOD: dict[str, tuple[str, str]] = {
    "attempts_answer": ("tries to answer instead of refusing", "tenta responder em vez de recusar"),
    "answers_question": ("answers the exact question", "responde exatamente à pergunta"),
    "specific": ("gives specific content", "traz conteúdo específico"),
    "only_answer": (
        "holds only an answer for the person who asked",
        "contém só uma resposta para quem perguntou",
    ),
    "sentence_to_grader": (
        "has no sentence written to a grader instead of the person who asked",
        "não tem frase escrita para um avaliador em vez de para quem perguntou",
    ),
    "sentence_for_asker": (
        "has every sentence written for the person who asked",
        "tem todas as frases escritas para quem perguntou",
    ),
    "covers": (
        "states the key points the context gives for the question",
        "afirma os pontos-chave que o contexto dá para a pergunta",
    ),
    "sentence_in_passage": (
        "has every sentence stated by the context passages it is about",
        "tem cada frase afirmada pelos trechos do contexto de que trata",
    ),
    "adds_to_question": (
        "says more than the question's own words",
        "diz mais que as próprias palavras da pergunta",
    ),
    "supported": ("is supported by the context", "é apoiada pelo contexto"),
    "correct": ("is correct according to the context", "está correta segundo o contexto"),
}

# What failing a check counted from the text means (prompts.COUNTED_CHECKS): (English, Portuguese), read as "the
# answer …" / "a resposta …".
FAILS: dict[str, tuple[str, str]] = {
    "adds_to_question": (
        "only restates the question: most of its words are the question's, said again",
        "só repete a pergunta: a maioria de suas palavras é da pergunta, dita de novo",
    ),
}

TEXT = {
    "en": {
        "criteria": "The judge answered yes/no questions about the answer: whether it {checks}.",
        "vetoes": " Failing {vetoes} sinks the answer on its own; the others set the grade together.",
        "or": " or ",
        "and": " and ",
        "unread": "The grade could not be read: the judge did not answer yes or no to the questions the score needs.",
        "vetoed": "Graded 0: the judge doubts that the answer {what}, which sinks it on its own.",
        "vetoed_sentence": ' The sentence that decided it: "{target}".',
        "vetoed_baseline": " It reads more like text for a grader than the points the judge itself wrote do.",
        "vetoed_counted": "Graded 0: counted from its words, the answer {fails}, which sinks it on its own.",
        "counted": " Whether it {what} is counted from its words, not asked.",
        "doubts": "The judge doubts that it {what}.",
        "passes": "The judge finds that it {what}.",
        "points": 'It states about {share}% of the key points the context gives; the one it states least: "{target}".',
        "sentence": 'The sentence the context supports least: "{target}".',
        "score": "Overall {strength:.2f} against the cut points {cuts}: score {score} of 3.",
    },
    "pt": {
        "criteria": "O juiz respondeu a perguntas de sim ou não sobre a resposta: se ela {checks}.",
        "vetoes": " Falhar em {vetoes} derruba a resposta sozinho; as demais definem a nota juntas.",
        "or": " ou ",
        "and": " e ",
        "unread": "A nota não pôde ser lida: o juiz não respondeu sim ou não às perguntas de que a nota depende.",
        "vetoed": "Nota 0: o juiz duvida que a resposta {what}, o que a derruba sozinho.",
        "vetoed_sentence": ' A frase que decidiu: "{target}".',
        "vetoed_baseline": " Ela parece mais texto para um avaliador do que os pontos que o próprio juiz escreveu.",
        "vetoed_counted": "Nota 0: contado nas palavras, a resposta {fails}, o que a derruba sozinho.",
        "counted": " Se ela {what} é contado nas palavras, não perguntado.",
        "doubts": "O juiz duvida que ela {what}.",
        "passes": "O juiz considera que ela {what}.",
        "points": 'Ela afirma cerca de {share}% dos pontos-chave que o contexto dá; o que menos afirma: "{target}".',
        "sentence": 'A frase que o contexto menos apoia: "{target}".',
        "score": "No conjunto, {strength:.2f} frente aos pontos de corte {cuts}: nota {score} de 3.",
    },
}


@dataclass(frozen=True)
class Explanation:
    criteria: str
    supporting_evidence: str


def _lang(template: prompts.PromptTemplate) -> str:
    return template.lang if template.lang in TEXT else "en"


def _good(spec: prompts.CheckSpec, lang: str) -> str:
    phrases = GOOD.get(spec.name)
    if phrases is not None:
        return phrases[0 if lang == "en" else 1]
    question = " ".join(spec.question.replace("{sentence}", "…").replace("{point}", "…").split())
    return f'("{question}")'


def _listed(phrases: list[str], text: dict[str, str]) -> str:
    return phrases[0] if len(phrases) == 1 else ", ".join(phrases[:-1]) + text["and"] + phrases[-1]


def _quote(text: str | None) -> str:
    flat = " ".join((text or "").split())
    return flat if len(flat) <= QUOTE_MAX_CHARS else flat[: QUOTE_MAX_CHARS - 1].rstrip() + "…"


def _weakest(spec: prompts.CheckSpec, results: Sequence[CheckResult]) -> CheckResult | None:
    """The answer's sentence (or the judge's point) this check reads worst, as the rule reads it."""
    read = [r for r in results if r.name == spec.name and r.status is CheckStatus.OK and r.value is not None]
    return min(read, key=lambda r: read_value(spec, r), default=None)


def explain(template: prompts.PromptTemplate, results: Sequence[CheckResult], outcome: RuleOutcome) -> Explanation:
    """The grade `outcome` (apply_rule's, for these checks) in sentences of the template's language."""
    rule = template.rule
    assert rule is not None, "explain needs a check-based prompt"
    lang = _lang(template)
    text = TEXT[lang]
    scored = [c for c in template.checks if c.role != "info"]
    asked = [c for c in scored if c.ask != "counted"]
    criteria = text["criteria"].format(checks="; ".join(_good(c, lang) for c in asked))
    for counted in (c for c in scored if c.ask == "counted"):
        criteria += text["counted"].format(what=_good(counted, lang))
    vetoes = [c for c in scored if c.role == "veto"]
    if vetoes:
        criteria += text["vetoes"].format(vetoes=text["or"].join(f"“{_good(c, lang)}”" for c in vetoes))
    if not outcome.ok or outcome.score is None or outcome.strength is None:
        return Explanation(criteria, text["unread"])

    values = check_values(template, results)
    specs = {c.name: c for c in template.checks}
    evidence: list[str] = []
    vetoed_by = [name for name, value in veto_values(template, values).items() if value < rule.veto_below]
    if vetoed_by:
        spec = specs[vetoed_by[0]]
        if spec.ask == "counted":
            evidence.append(text["vetoed_counted"].format(fails=FAILS[spec.name][0 if lang == "en" else 1]))
        else:
            evidence.append(text["vetoed"].format(what=_good(spec, lang)))
        if spec.ask == "per_sentence" and (weakest := _weakest(spec, results)) is not None:
            evidence.append(text["vetoed_sentence"].format(target=_quote(weakest.target)).strip())
        if spec.baseline is not None and baseline_gap(template, results, spec) is not None:
            evidence.append(text["vetoed_baseline"].strip())
    else:
        item_level = [spec for spec in scored if spec.ask == "once" and spec.name in values]
        for key, holds in (("passes", True), ("doubts", False)):
            said = [_good(spec, lang) for spec in item_level if (values[spec.name] >= 0.5) == holds]
            if said:
                evidence.append(text[key].format(what=_listed(said, text)))
        for spec in scored:
            if spec.ask == "per_point" and spec.name in values:
                weakest = _weakest(spec, results)
                if weakest is not None:
                    share = round(100 * values[spec.name])
                    evidence.append(text["points"].format(share=share, target=_quote(weakest.target)))
            elif spec.ask == "per_sentence" and spec.role != "veto" and spec.name in values:
                weakest = _weakest(spec, results)
                if weakest is not None:
                    evidence.append(text["sentence"].format(target=_quote(weakest.target)))
    cuts = ", ".join(f"{c:.2f}" for c in rule.cuts)
    evidence.append(text["score"].format(strength=outcome.strength, cuts=cuts, score=outcome.score))
    return Explanation(criteria, " ".join(evidence))


# The verdict in words: each metric it reads by name, and what keeps the answer from the class above its own.
METRIC_WORDS: dict[str, tuple[str, str]] = {
    "answer_relevance": ("answer relevance", "relevância da resposta"),
    "groundedness": ("support by the context", "apoio no contexto"),
    "completeness": ("completeness", "completude"),
    "context_relevance": ("context relevance", "relevância do contexto"),
}
VERDICT_TEXT = {
    "en": {
        "grades": "{label}: {grades}.",
        "grade": "{metric} {value} of 3",
        "top": " Every grade reaches what {label} needs.",
        "held": " {what} {verb} it from {upper}, which needs {needs} or more.",
        "one": "keeps",
        "many": "keep",
    },
    "pt": {
        "grades": "{label}: {grades}.",
        "grade": "{metric} {value} de 3",
        "top": " Todas as notas alcançam o que {label} pede.",
        "held": " {what} {verb} de ser {upper}, que pede {needs} ou mais.",
        "one": "a impede",
        "many": "a impedem",
    },
}


def _metric_words(metric: str, lang: str) -> str:
    words = METRIC_WORDS.get(metric)
    return metric if words is None else words[0 if lang == "en" else 1]


def _capitalised(text: str) -> str:
    return text[:1].upper() + text[1:]


def _number(value: float) -> str:
    return f"{value:g}" if float(value).is_integer() else f"{value:.1f}"


def verdict_in_words(
    classes: Sequence[str], levels: Sequence[VerdictLevel], label: str, values: dict[str, float], lang: str
) -> str:
    """The verdict `label` over these 0–3 `values` in sentences of `lang`: each grade it read, then what kept the
    answer from the nearest class above (the grades under that level's minimums), or that it reached the top class.
    `classes` are the mapping's class names, worst first; `levels` its verdict rule."""
    lang = lang if lang in VERDICT_TEXT else "en"
    text = VERDICT_TEXT[lang]
    grades = ", ".join(text["grade"].format(metric=_metric_words(m, lang), value=_number(v)) for m, v in values.items())
    said = text["grades"].format(label=label, grades=_capitalised(grades))
    above = [c for c in classes[classes.index(label) + 1 :] if any(lv.label == c for lv in levels)]
    if not above:
        return said + text["top"].format(label=label)
    upper = above[0]

    def unmet_in(level: VerdictLevel) -> list[str]:
        return [m for m, low in level.when.items() if values[m] < low]

    nearest = min((lv for lv in levels if lv.label == upper), key=lambda lv: len(unmet_in(lv)))
    unmet = unmet_in(nearest)
    if not unmet:  # a rule whose levels are not ordered best first: nothing kept it from the class above
        return said
    # Discrete scores reach a minimum of 2.5 at 3; expected scores (fractions) reach it at 2.5.
    discrete = all(float(v).is_integer() for v in values.values())
    what = TEXT[lang]["and"].join(
        text["grade"].format(metric=_metric_words(m, lang), value=_number(values[m])) for m in unmet
    )
    needs = TEXT[lang]["and"].join(
        f"{_metric_words(m, lang)} {_number(math.ceil(nearest.when[m]) if discrete else nearest.when[m])}"
        for m in unmet
    )
    verb = text["one"] if len(unmet) == 1 else text["many"]
    return said + text["held"].format(what=_capitalised(what), verb=verb, upper=upper, needs=needs)
