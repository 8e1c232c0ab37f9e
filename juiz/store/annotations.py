"""The team's labels, kept per tenant and per triple (its content key), not per batch; and the label queue's leases.

    labels:{t}:{key}          hash    "annotator\\x1fmetric" → Annotation JSON: one label per annotator (and metric)
    labels:{t}:{key}:places   set     "batch id:item index" of every stored result of this triple
    labels:{t}:index          set     the content keys the tenant labelled (what an export walks)
    batch:{id}:lease:{item}   zset    annotator → lease expiry: who holds the item in a label queue now
    batch:{id} consensus      field   the batch's ConsensusRule JSON (default: majority)
    batch:{id} rubric         field   what the classes mean, for the batch's annotators

An annotator writes only their own field, so nobody's label replaces another's. A result stored for a triple the
tenant already labelled carries those labels (`Results.store` calls `attach`), and a label set later reaches every
stored result of its triple (`places`): the same triples submitted again see every label of the earlier runs.
"""

from __future__ import annotations

from collections.abc import Sequence

from redis import Redis

from juiz.agreement.consensus import reference_label
from juiz.agreement.labels import resolve_numeric_scale
from juiz.runtime.errors import InputError
from juiz.store.keys import PREFIX, batch_key, text
from schemas import Judgement
from schemas.annotation import Annotation, ConsensusRule
from schemas.labels import LabelMapping
from schemas.triple import Label

SEPARATOR = "\x1f"
UPLOADED = "uploaded_label"  # a result's extra field: the label its upload gave, before anyone labelled it
MAX_PLACES = 200  # stored results one label is copied to (older runs beyond are read with the labelled set's export)

# Take (or renew) a lease on an item. KEYS: the item's lease zset. ARGV: annotator, now, expiry, k.
# 1: held by the caller now; 0: k others hold it.
_TAKE = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[2])
if redis.call('ZSCORE', KEYS[1], ARGV[1]) or redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[4]) then
  redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
  redis.call('EXPIREAT', KEYS[1], math.ceil(tonumber(ARGV[3])))
  return 1
end
return 0
"""


def labels_key(tenant: str, content_key: str) -> str:
    return f"{PREFIX}:labels:{tenant}:{content_key}"


def places_key(tenant: str, content_key: str) -> str:
    return f"{labels_key(tenant, content_key)}:places"


def labels_index_key(tenant: str) -> str:
    return f"{PREFIX}:labels:{tenant}:index"


def lease_key(batch_id: str, item: int) -> str:
    return batch_key(batch_id, f"lease:{item}")


def _field(annotator: str, metric: str | None) -> str:
    return f"{annotator}{SEPARATOR}{metric or ''}"


def consensus_label(
    annotations: Sequence[Annotation], rule: ConsensusRule, mapping: LabelMapping, item: str
) -> Label | None:
    """The item's reference label under `rule`, None when it gives none (a tie, a label the mapping doesn't know)."""
    try:
        scale = resolve_numeric_scale([a.label for a in annotations], mapping)
        label, _ = reference_label(annotations, rule, mapping, scale, item)
    except InputError:
        return None
    return label


class Annotations:
    def __init__(self, redis: Redis) -> None:
        self.redis = redis
        self._take = redis.register_script(_TAKE)

    # --- the labelled set ---------------------------------------------------------------------------------------

    def of_triples(self, tenant: str, content_keys: Sequence[str]) -> dict[str, list[Annotation]]:
        """Every annotator's labels on each triple (triples nobody labelled are left out)."""
        with self.redis.pipeline(transaction=False) as pipe:
            for key in content_keys:
                pipe.hvals(labels_key(tenant, key))
            replies = pipe.execute()
        return {
            key: sorted((Annotation.model_validate_json(text(v)) for v in values), key=lambda a: a.annotator)
            for key, values in zip(content_keys, replies, strict=True)
            if values
        }

    def put(self, tenant: str, content_key: str, annotation: Annotation) -> Annotation | None:
        """Set the annotator's own label on the triple (their earlier one replaced; nobody else's touched). Returns
        the annotator's label it replaced."""
        field = _field(annotation.annotator, annotation.metric)
        with self.redis.pipeline(transaction=True) as pipe:
            pipe.hget(labels_key(tenant, content_key), field)
            pipe.hset(labels_key(tenant, content_key), field, annotation.model_dump_json())
            pipe.sadd(labels_index_key(tenant), content_key)
            previous, _, _ = pipe.execute()
        return None if previous is None else Annotation.model_validate_json(text(previous))

    def remove(self, tenant: str, content_key: str, annotator: str, metric: str | None = None) -> Annotation | None:
        """Clear the annotator's own label on the triple; returns it."""
        field = _field(annotator, metric)
        with self.redis.pipeline(transaction=True) as pipe:
            pipe.hget(labels_key(tenant, content_key), field)
            pipe.hdel(labels_key(tenant, content_key), field)
            previous, _ = pipe.execute()
        return None if previous is None else Annotation.model_validate_json(text(previous))

    def export(self, tenant: str) -> dict[str, list[Annotation]]:
        """The tenant's whole labelled set: content key → its labels."""
        keys = sorted(text(k) for k in self.redis.smembers(labels_index_key(tenant)))
        return self.of_triples(tenant, keys)

    # --- where a triple's results are -------------------------------------------------------------------------

    def add_places(self, tenant: str, batch_id: str, places: Sequence[tuple[str, int]]) -> None:
        """Record that the batch's items of these indices are of these triples (content key, item index)."""
        if not places:
            return
        with self.redis.pipeline(transaction=False) as pipe:
            for key, index in places:
                pipe.sadd(places_key(tenant, key), f"{batch_id}:{index}")
            pipe.execute()

    def places(self, tenant: str, content_key: str) -> list[tuple[str, int]]:
        """(batch id, item index) of the triple's results, at most MAX_PLACES."""
        out = []
        for member in sorted(text(m) for m in self.redis.smembers(places_key(tenant, content_key)))[:MAX_PLACES]:
            batch_id, _, index = member.rpartition(":")
            out.append((batch_id, int(index)))
        return out

    def forget_place(self, tenant: str, content_key: str, batch_id: str, index: int) -> None:
        self.redis.srem(places_key(tenant, content_key), f"{batch_id}:{index}")

    def position_of(self, batch_id: str, index: int) -> int | None:
        """Where the item's result sits in the batch's results list (read from the uncertainty index's members)."""
        for member, _ in self.redis.zscan_iter(batch_key(batch_id, "uncertain"), match=f"{index:010d}:*", count=1000):
            return int(text(member).rpartition(":")[2])
        return None

    def attach(
        self, tenant: str, batch_id: str, results: Sequence[tuple[int, Judgement]], mapping: LabelMapping
    ) -> list[tuple[int, Judgement]]:
        """Results about to be stored, with the labels the tenant already gave their triples (as annotations, and the
        consensus as manual_label); their places recorded first, so a label set meanwhile still reaches them."""
        keys = [j.content_key() for _, j in results]
        self.add_places(tenant, batch_id, [(k, index) for k, (index, _) in zip(keys, results, strict=True)])
        rule = self.rule(batch_id)
        known = self.of_triples(tenant, keys)
        out = []
        for key, (index, judgement) in zip(keys, results, strict=True):
            if key in known:
                judgement = with_annotations(judgement, known[key], mapping, rule)
            out.append((index, judgement))
        return out

    # --- consensus rule per batch -----------------------------------------------------------------------------

    def rule(self, batch_id: str) -> ConsensusRule:
        raw = self.redis.hget(batch_key(batch_id), "consensus")
        return ConsensusRule() if raw is None else ConsensusRule.model_validate_json(text(raw))

    def set_rule(self, batch_id: str, rule: ConsensusRule) -> None:
        self.redis.hset(batch_key(batch_id), "consensus", rule.model_dump_json())

    def rubric(self, batch_id: str) -> str:
        """What the batch's classes mean to its annotators (shown in the label queue); "" when none was written."""
        raw = self.redis.hget(batch_key(batch_id), "rubric")
        return "" if raw is None else text(raw)

    def set_rubric(self, batch_id: str, rubric: str) -> None:
        if rubric.strip():
            self.redis.hset(batch_key(batch_id), "rubric", rubric.strip())
        else:
            self.redis.hdel(batch_key(batch_id), "rubric")

    # --- leases -----------------------------------------------------------------------------------------------

    def take_lease(self, batch_id: str, item: int, annotator: str, k: int, ttl_s: float, now: float) -> bool:
        """Hold the item for `annotator` until now + ttl_s (renewed when held already); False when k others do."""
        return bool(self._take(keys=[lease_key(batch_id, item)], args=[annotator, repr(now), repr(now + ttl_s), k]))

    def release_lease(self, batch_id: str, item: int, annotator: str) -> None:
        self.redis.zrem(lease_key(batch_id, item), annotator)


def with_annotations(
    judgement: Judgement, annotations: Sequence[Annotation], mapping: LabelMapping, rule: ConsensusRule
) -> Judgement:
    """The result carrying the triple's labels, and their consensus as its manual_label. A label the upload gave
    (no author recorded) is kept as `uploaded_label` and stands in only while no annotator labelled the item."""
    extra = judgement.model_extra or {}
    if UPLOADED in extra:
        uploaded = extra[UPLOADED]
    elif judgement.manual_label is not None and not judgement.annotations and not extra.get("manual_label_by"):
        uploaded = judgement.manual_label
    else:
        uploaded = None
    every = list(annotations)
    update: dict[str, object] = {
        "annotations": every or None,
        "manual_label": consensus_label(every, rule, mapping, judgement.id) if every else uploaded,
        UPLOADED: uploaded,
    }
    dated = [a for a in every if a.at is not None]
    if dated:
        latest = max(dated, key=lambda a: a.at.timestamp() if a.at else 0.0)
        update["manual_label_by"] = latest.annotator
        update["manual_label_at"] = latest.at.isoformat() if latest.at else None
    return judgement.model_copy(update=update)
