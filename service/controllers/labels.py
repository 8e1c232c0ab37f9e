"""/v1/labels: the tenant's labelled set, the team's labels kept per triple (its content key) and so shared by every
run of the same triples: exported as a labels file (JSONL, what `juiz agreement --labels` reads) and imported from
one."""

from __future__ import annotations

from litestar import Controller, get, post
from litestar.di import NamedDependency
from litestar.params import JSONBody

from juiz.store import Store
from schemas.annotation import AnnotationRecord
from schemas.labelsets import LabelsImport, LabelsImported
from service.labelling import import_labels
from service.openapi import responses

NDJSON = "application/x-ndjson"


class LabelsController(Controller):
    path = "/v1/labels"
    tags = ["labels"]  # noqa: RUF012 - Litestar reads it as a class attribute

    @get(
        "/",
        operation_id="exportLabels",
        sync_to_thread=True,
        media_type=NDJSON,
        responses=responses(401, 429, 503),
    )
    def export(self, store: NamedDependency[Store], tenant: NamedDependency[str]) -> str:
        """The tenant's labelled set as a labels file: one line per annotator's label, its triple by content key."""
        lines = [
            AnnotationRecord(triple=key, **a.model_dump()).model_dump_json(exclude_none=True)
            for key, annotations in store.annotations.export(tenant).items()
            for a in annotations
        ]
        return "".join(f"{line}\n" for line in lines)

    @post("/", operation_id="importLabels", sync_to_thread=True, responses=responses(401, 413, 422, 429, 503))
    def load(
        self, store: NamedDependency[Store], tenant: NamedDependency[str], data: JSONBody[LabelsImport]
    ) -> LabelsImported:
        """Add a labels file's lines to the tenant's labelled set (each line names its triple by content key, e.g.
        from another deployment's export). Every stored result of those triples carries them at once."""
        return LabelsImported(imported=import_labels(store, tenant, data.labels))
