"""The team's labels, kept per tenant and per triple (its content key), not per batch; and the label queue's leases.

    labels:{t}:{key}          hash    "annotator\\x1fmetric" → Annotation JSON: one label per annotator (and metric)
    labels:{t}:{key}:places   set     "batch id:item index" of every stored result of this triple
    labels:{t}:index          set     the content keys the tenant labelled (what an export walks)
    labels:{{t}}:sets         zset    name → created_at: the tenant's named labelled sets (tenant as hash tag)
    labels:{{t}}:set:{name}   hash    a named set's description, rubric, created_at, updated_at, source_batch
    labels:{{t}}:set:{name}:items  hash  content key → the triple's JSON (what a run of the set grades)
    labels:{{t}}:set:{name}:order  list  the set's content keys in the order they were added
    batch:{id}:lease:{item}   zset    annotator → lease expiry: who holds the item in a label queue now
    batch:{id} consensus      field   the batch's ConsensusRule JSON (default: majority)
    batch:{id} rubric         field   what the classes mean, for the batch's annotators

A named labelled set holds triples, not labels: its labels are the tenant's labels of its triples, so a label set on
any run of a triple is the set's label too, and a run of the set (a batch of its triples) carries them (`attach`).

An annotator writes only their own field, so nobody's label replaces another's. A result stored for a triple the
tenant already labelled carries those labels (`Results.store` calls `attach`), and a label set later reaches every
stored result of its triple (`places`): the same triples submitted again see every label of the earlier runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from redis import Redis

from juiz.agreement.consensus import reference_label
from juiz.agreement.labels import resolve_numeric_scale
from juiz.runtime.errors import InputError
from juiz.store.keys import PREFIX, batch_key, text
from schemas import Judgement
from schemas.annotation import Annotation, ConsensusRule
from schemas.labels import LabelMapping
from schemas.triple import Label, Triple

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


# Create a named set unless it exists. KEYS: the set's hash, the tenant's sets zset. ARGV: name, now, description,
# rubric, source batch. 1: created; 0: a set of that name exists.
_CREATE_SET = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'name', ARGV[1], 'created_at', ARGV[2], 'updated_at', ARGV[2], 'description', ARGV[3],
  'rubric', ARGV[4], 'source_batch', ARGV[5])
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
return 1
"""

# Add triples to a named set, each once. KEYS: the set's hash, items hash, order list. ARGV: now, then content key and
# triple JSON pairs. Returns how many were new; -1 when the set is gone.
_ADD_TO_SET = """
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
local added = 0
for i = 2, #ARGV, 2 do
  if redis.call('HSETNX', KEYS[2], ARGV[i], ARGV[i + 1]) == 1 then
    redis.call('RPUSH', KEYS[3], ARGV[i])
    added = added + 1
  end
end
redis.call('HSET', KEYS[1], 'updated_at', ARGV[1])
return added
"""

# Change a named set's own fields. KEYS: the set's hash. ARGV: now, then field and value pairs. 0 when the set is gone.
_UPDATE_SET = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
for i = 2, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
redis.call('HSET', KEYS[1], 'updated_at', ARGV[1])
return 1
"""
SET_WRITE_CHUNK = 500  # triples per script call: Redis waits for none longer than that


@dataclass(frozen=True)
class LabelledSetRecord:
    """A named set's own fields (its labels are the tenant's labels of its triples)."""

    name: str
    created_at: float
    updated_at: float
    description: str
    rubric: str
    source_batch: str | None
    items: int


# A tenant's named sets share one hash slot (the tenant as the hash tag): the scripts that make and fill a set name
# its keys and the tenant's list of sets in one call.
def sets_key(tenant: str) -> str:
    return f"{PREFIX}:labels:{{{tenant}}}:sets"


def set_key(tenant: str, name: str, part: str = "") -> str:
    return f"{PREFIX}:labels:{{{tenant}}}:set:{name}" + (f":{part}" if part else "")


class Annotations:
    def __init__(self, redis: Redis) -> None:
        self.redis = redis
        self._take = redis.register_script(_TAKE)
        self._create_set = redis.register_script(_CREATE_SET)
        self._add_to_set = redis.register_script(_ADD_TO_SET)
        self._update_set = redis.register_script(_UPDATE_SET)

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

    # --- named labelled sets ----------------------------------------------------------------------------------

    def create_set(
        self, tenant: str, name: str, now: float, description: str = "", rubric: str = "", source_batch: str = ""
    ) -> bool:
        """A new empty named set; False when the tenant has one of that name."""
        keys = [set_key(tenant, name), sets_key(tenant)]
        return bool(self._create_set(keys=keys, args=[name, repr(now), description, rubric, source_batch]))

    def add_to_set(self, tenant: str, name: str, triples: Sequence[tuple[str, Triple]], now: float) -> int:
        """Add (content key, triple) pairs to the set, a triple already in it kept as it was. Returns how many were
        new; KeyError when the set is gone."""
        keys = [set_key(tenant, name), set_key(tenant, name, "items"), set_key(tenant, name, "order")]
        added = 0
        for start in range(0, max(len(triples), 1), SET_WRITE_CHUNK):
            args: list[str] = [repr(now)]
            for key, triple in triples[start : start + SET_WRITE_CHUNK]:
                args += [key, triple.model_dump_json(exclude_none=True)]
            count = int(self._add_to_set(keys=keys, args=args))
            if count < 0:
                raise KeyError(f"no labelled set {name!r}")
            added += count
        return added

    def update_set(
        self, tenant: str, name: str, now: float, description: str | None = None, rubric: str | None = None
    ) -> bool:
        """Set the named set's description and/or rubric (None: left as it is); False when the set is gone."""
        args = [repr(now)]
        for field, value in (("description", description), ("rubric", rubric)):
            if value is not None:
                args += [field, value]
        return bool(self._update_set(keys=[set_key(tenant, name)], args=args))

    def get_set(self, tenant: str, name: str) -> LabelledSetRecord | None:
        with self.redis.pipeline(transaction=False) as pipe:
            pipe.hgetall(set_key(tenant, name))
            pipe.llen(set_key(tenant, name, "order"))
            raw, count = pipe.execute()
        if not raw:
            return None
        fields = {text(k): text(v) for k, v in raw.items()}
        return LabelledSetRecord(
            name=fields["name"],
            created_at=float(fields["created_at"]),
            updated_at=float(fields["updated_at"]),
            description=fields.get("description", ""),
            rubric=fields.get("rubric", ""),
            source_batch=fields.get("source_batch") or None,
            items=int(count),
        )

    def list_sets(self, tenant: str) -> list[LabelledSetRecord]:
        """The tenant's named sets, newest first."""
        names = [text(n) for n in self.redis.zrevrange(sets_key(tenant), 0, -1)]
        found = [self.get_set(tenant, name) for name in names]
        return [record for record in found if record is not None]

    def set_triples(self, tenant: str, name: str) -> list[tuple[str, Triple]]:
        """The set's (content key, triple) pairs, in the order they were added."""
        keys = [text(k) for k in self.redis.lrange(set_key(tenant, name, "order"), 0, -1)]
        out: list[tuple[str, Triple]] = []
        for start in range(0, len(keys), SET_WRITE_CHUNK):
            chunk = keys[start : start + SET_WRITE_CHUNK]
            values = self.redis.hmget(set_key(tenant, name, "items"), chunk)
            out += [(k, Triple.model_validate_json(text(v))) for k, v in zip(chunk, values, strict=True) if v]
        return out

    def delete_set(self, tenant: str, name: str) -> bool:
        """Forget the named set (its triples' labels stay the tenant's). False when there was none."""
        with self.redis.pipeline(transaction=True) as pipe:
            pipe.delete(set_key(tenant, name), set_key(tenant, name, "items"), set_key(tenant, name, "order"))
            pipe.zrem(sets_key(tenant), name)
            deleted, _ = pipe.execute()
        return bool(deleted)

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
