#!/usr/bin/env python3
"""fleetwire's OpenAPI documents as their consumers read them, with independent validators.

Usage (from the workspace root; `.ci/run` does all of it):

    python3 -m pip install -r tests/openapi/requirements.txt
    FLEETWIRE_OPENAPI_ANSWERS=/tmp/answers \
        cargo test -p fleetwire-e2e --test controller_api
    python3 tests/openapi/check_openapi.py --answers /tmp/answers

It checks `generated/openapi/fleet-api.json` (OpenAPI 3.0.3) and
`generated/openapi/fleet-api.3.1.json` (OpenAPI 3.1.0) with openapi-spec-validator and
openapi-schema-validator (python-openapi; not the Rust code that wrote the documents):

1. each is a valid OpenAPI document of its version;
2. every fixture `schemas/examples/<Type>/valid/*.json` validates against
   `components.schemas.<Type>` of both documents, and every `invalid/*.json` is refused by both
   (formats checked); a fixture type the API does not use is not in the documents and is
   listed as such, never skipped silently;
3. with `--answers DIR`: every live answer the API conformance test
   (tests/tests/controller_api.rs) recorded there validates against the response schema that
   each document gives for its operation, method, path template and status (or `default`).
   No answers in DIR is a failure. A JSON request body the controller accepted (2xx), recorded
   with its answer, must validate against the operation's request body schema as well.

Exit status 0 when everything holds, 1 with every failure listed otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

# OpenAPI reads `pattern` as ECMA-262; openapi-schema-validator does so only with regress
# installed (else Python's `re`, whose `$` also matches before a final newline). Required here.
import regress  # noqa: F401
from jsonschema.exceptions import best_match
from openapi_schema_validator import (
    OAS30ReadValidator,
    OAS30StrictValidator,
    OAS30WriteValidator,
    OAS31Validator,
    oas30_strict_format_checker,
    oas31_format_checker,
)
from openapi_spec_validator import OpenAPIV30SpecValidator, OpenAPIV31SpecValidator

WORKSPACE = Path(__file__).resolve().parents[2]
DOCUMENTS = {
    "3.0": WORKSPACE / "generated/openapi/fleet-api.json",
    "3.1": WORKSPACE / "generated/openapi/fleet-api.3.1.json",
}
EXAMPLES = WORKSPACE / "schemas/examples"

# Fixtures refused by the 2020-12 schemas through something an OpenAPI dialect cannot express,
# as {(version, Type, file name): reason}. Each entry must say why; the checker fails when an
# entry is no longer needed, so the list cannot go stale.
NOT_EXPRESSIBLE: dict[tuple[str, str, str], str] = {}


class Checker:
    def __init__(self) -> None:
        self.failures: list[str] = []
        self.counts: dict[str, int] = {}

    def fail(self, message: str) -> None:
        self.failures.append(message)

    def count(self, what: str) -> None:
        self.counts[what] = self.counts.get(what, 0) + 1


def validators(version: str, document: dict, schema: dict, reading: bool = False) -> list:
    """(name, validator) for `schema`, which may refer to the document's components."""
    root = dict(schema)
    root["components"] = document.get("components", {})
    if version == "3.0":
        found = [("OAS30StrictValidator",
                  OAS30StrictValidator(root, format_checker=oas30_strict_format_checker))]
        if reading:
            # A client reading a response: writeOnly fields must be absent, readOnly ones count.
            found.append(("OAS30ReadValidator",
                          OAS30ReadValidator(root, format_checker=oas30_strict_format_checker)))
        return found
    return [("OAS31Validator", OAS31Validator(root, format_checker=oas31_format_checker))]


def errors_of(found: list, instance) -> list[str]:
    out = []
    for name, validator in found:
        error = best_match(validator.iter_errors(instance))
        if error is not None:
            pointer = "/" + "/".join(str(p) for p in error.absolute_path)
            out.append(f"{name}: at {pointer}: {error.message}")
    return out


def check_documents(c: Checker, documents: dict[str, dict]) -> None:
    for version, document in documents.items():
        spec = OpenAPIV30SpecValidator if version == "3.0" else OpenAPIV31SpecValidator
        problems = [str(e.message) for e in spec(document).iter_errors()]
        expected = "3.0.3" if version == "3.0" else "3.1.0"
        if document.get("openapi") != expected:
            problems.append(f"`openapi` is {document.get('openapi')!r}, not {expected}")
        for p in problems:
            c.fail(f"{DOCUMENTS[version].name}: not a valid OpenAPI {version} document: {p}")
        if not problems:
            c.count(f"valid OpenAPI {version} documents")


def check_fixtures(c: Checker, documents: dict[str, dict]) -> None:
    used_exceptions = set()
    not_in_api = []
    for type_dir in sorted(p for p in EXAMPLES.iterdir() if p.is_dir()):
        name = type_dir.name
        for version, document in documents.items():
            components = document["components"]["schemas"]
            if name not in components:
                if version == "3.0":
                    not_in_api.append(name)
                continue
            found = validators(version, document, {"$ref": f"#/components/schemas/{name}"})
            for kind in ("valid", "invalid"):
                for fixture in sorted((type_dir / kind).glob("*.json")):
                    where = f"OpenAPI {version} {name}: {kind}/{fixture.name}"
                    instance = json.loads(fixture.read_text())
                    errors = errors_of(found, instance)
                    if kind == "valid":
                        if errors:
                            c.fail(f"{where} is refused: {'; '.join(errors)}")
                        else:
                            c.count(f"valid fixtures accepted ({version})")
                        continue
                    key = (version, name, fixture.name)
                    if key in NOT_EXPRESSIBLE:
                        used_exceptions.add(key)
                        if not errors:
                            print(f"note: {where} is accepted: {NOT_EXPRESSIBLE[key]}")
                            c.count(f"invalid fixtures not expressible ({version})")
                            continue
                        c.fail(f"{where} is refused after all: drop it from NOT_EXPRESSIBLE")
                    elif len(errors) != len(found):
                        c.fail(f"{where} is accepted by a validator (refused only by: {errors})")
                    else:
                        c.count(f"invalid fixtures refused ({version})")
    for key in sorted(set(NOT_EXPRESSIBLE) - used_exceptions):
        c.fail(f"NOT_EXPRESSIBLE names {key}, which no fixture matches")
    for name in not_in_api:
        # Not a body of the controller's API (a host file, or the node runtime's own wire), so
        # the API documents do not carry it; fleetwire-types validates these fixtures.
        print(f"note: {name}: no operation of the API uses it, so neither document has it")


def response_schema(document: dict, answer: dict) -> tuple[dict | None, str | None, str]:
    """(schema, media type, description of the lookup) for one recorded answer."""
    item = document["paths"].get(answer["path"])
    if item is None:
        raise LookupError(f"path {answer['path']} is not in the document")
    operation = item.get(answer["method"].lower())
    if operation is None:
        raise LookupError(f"{answer['method']} {answer['path']} is not in the document")
    if operation.get("operationId") != answer["operation"]:
        raise LookupError(
            f"{answer['method']} {answer['path']} is {operation.get('operationId')}, "
            f"not {answer['operation']}"
        )
    responses = operation["responses"]
    response = responses.get(str(answer["status"]), responses.get("default"))
    if response is None:
        raise LookupError(f"status {answer['status']} is not documented")
    content = response.get("content")
    if not content:
        return None, None, "no body"
    media, media_object = next(iter(content.items()))
    return media_object.get("schema"), media, media


def check_request(c: Checker, version: str, document: dict, answer: dict, label: str) -> None:
    """A JSON request the controller accepted (2xx) must be valid per the document too."""
    if answer.get("request") is None or not 200 <= answer["status"] < 300:
        return
    operation = document["paths"][answer["path"]][answer["method"].lower()]
    content = operation.get("requestBody", {}).get("content", {})
    schema = content.get("application/json", {}).get("schema")
    if schema is None:
        c.fail(f"OpenAPI {version} {label}: a JSON request where the document takes none")
        return
    found = validators(version, document, schema)
    if version == "3.0":
        # A client writing a request: readOnly fields must be absent.
        root = dict(schema, components=document.get("components", {}))
        found.append(("OAS30WriteValidator",
                      OAS30WriteValidator(root, format_checker=oas30_strict_format_checker)))
    errors = errors_of(found, answer["request"])
    if errors:
        c.fail(f"OpenAPI {version} {label}: the accepted request is refused: {'; '.join(errors)}")
    else:
        c.count(f"accepted requests valid ({version})")


def check_answers(c: Checker, documents: dict[str, dict], directory: Path) -> None:
    files = sorted(directory.glob("*.json"))
    if not files:
        c.fail(f"no recorded answers in {directory}: did the conformance test run with "
               "FLEETWIRE_OPENAPI_ANSWERS set?")
        return
    seen = set()
    for path in files:
        answer = json.loads(path.read_text())
        seen.add((answer["operation"], answer["status"]))
        label = (f"{path.name}: {answer['operation']} {answer['method']} "
                 f"{answer['path']} → {answer['status']}")
        for version, document in documents.items():
            try:
                schema, media, _ = response_schema(document, answer)
            except LookupError as e:
                c.fail(f"OpenAPI {version} {label}: {e}")
                continue
            check_request(c, version, document, answer, label)
            body = answer.get("body")
            if schema is None:
                if body not in (None, ""):
                    c.fail(f"OpenAPI {version} {label}: a body where the document has none")
                else:
                    c.count(f"live answers valid ({version})")
                continue
            essence = (answer.get("content_type") or "").split(";")[0].strip().lower()
            if essence != media.split(";")[0].strip().lower():
                c.fail(f"OpenAPI {version} {label}: Content-Type {answer.get('content_type')!r}, "
                       f"document says {media!r}")
                continue
            if "json" not in essence and not isinstance(body, str):
                c.fail(f"OpenAPI {version} {label}: a {media} body must be recorded as text")
                continue
            errors = errors_of(validators(version, document, schema, reading=True), body)
            if errors:
                c.fail(f"OpenAPI {version} {label}: {'; '.join(errors)}")
            else:
                c.count(f"live answers valid ({version})")
    print(f"answers: {len(files)} recorded, {len(seen)} (operation, status) pairs")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--answers", type=Path,
                        help="the directory the conformance test recorded its answers in")
    args = parser.parse_args()
    c = Checker()
    documents = {v: json.loads(p.read_text()) for v, p in DOCUMENTS.items()}
    check_documents(c, documents)
    check_fixtures(c, documents)
    if args.answers is not None:
        check_answers(c, documents, args.answers)
    for what, n in sorted(c.counts.items()):
        print(f"{what}: {n}")
    for failure in c.failures:
        print(f"FAIL {failure}", file=sys.stderr)
    checks = sum(c.counts.values())
    print(f"openapi: {checks} passed, {len(c.failures)} failed")
    return 1 if c.failures or checks == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
