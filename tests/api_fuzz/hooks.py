"""schemathesis hooks for tests/api_fuzz/run.sh (docs/reliability/api-fuzz.md).

One rule of the API that its documents state in words but their schemas cannot carry: an image is
pulled from its registry, so a VM with an `image` needs `network: true` (POST /v1/vms and the
agent's POST /v1/spawn answer 400 `imageNeedsNetwork` otherwise; the schemas hold no conditional
keywords, codegen/src/keywords.rs). A *positive* case (one the fuzzer means to be valid) that
names an image without `network: true` is not valid, so it is given `network: true`; negative
cases are left as generated, and the 400 stays checked by every other case.
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
