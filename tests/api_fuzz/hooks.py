"""schemathesis hooks for tests/api_fuzz/run.sh (docs/reliability/api-fuzz.md).

One rule of the API that its documents state in words but their schemas cannot carry: an image is
pulled from its registry, so a VM with an `image` needs `network: true` (POST /v1/vms and the
agent's POST /v1/spawn answer 400 `imageNeedsNetwork` otherwise; the schemas hold no conditional
keywords, codegen/src/keywords.rs). A *positive* case (one the fuzzer means to be valid) that
names an image without `network: true` is not valid, so it is given `network: true`; negative
cases are left as generated, and the 400 stays checked by every other case.

And one rule of `fieldValidation` the documents state in the parameter's words: under `Strict`
a body with a field its schema does not list is refused (400), although the schema, as the
tolerant readers take it, allows such fields. A positive case asking for `Strict` is therefore
sent with the default, `Warn`: what it means to be valid is then what the server accepts. The
refusals under `Strict` are checked by the negative cases and by tests/e2e/operator/field_validation.rs.
"""

import schemathesis
from schemathesis import GenerationMode


@schemathesis.hook("map_case").apply_to(operation_id=["create_vm", "spawn_vm"])
def an_image_needs_network(context, case):
    body = case.body
    positive = case.meta is not None and case.meta.generation.mode == GenerationMode.POSITIVE
    if positive and isinstance(body, dict) and isinstance(body.get("image"), str):
        body["network"] = True
    return case


@schemathesis.hook("map_case")
def strict_is_for_documents_without_unknown_fields(context, case):
    positive = case.meta is not None and case.meta.generation.mode == GenerationMode.POSITIVE
    query = case.query
    if positive and isinstance(query, dict) and query.get("fieldValidation") == "Strict":
        query["fieldValidation"] = "Warn"
    return case
