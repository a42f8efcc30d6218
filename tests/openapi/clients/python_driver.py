"""The client openapi-generator (`-g python`) made of a fleetwire API document, driven by
tests/openapi/generated_clients.py: `python_driver.py CLIENT_DIR`, then one call a line on
stdin, each {"operation", "base", "ca", "token", "cert", "key", "params", "body", "body_type",
"text_answer"}, and one line on stdout for each: {"answer": …} with what the client read into
its model, or {"error": "…"}. One process for every call of a plan: the generated package is
imported once (docs/interop.md, "Client generators, whole")."""

import inspect
import json
import sys
import traceback
import typing

sys.path.insert(0, sys.argv[1])

import openapi_client  # noqa: E402  (the generated package, from CLIENT_DIR)
from openapi_client import api as apis  # noqa: E402


def plain(value):
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def answer(call: dict):
    config = openapi_client.Configuration(host=call["base"])
    if call.get("ca"):
        config.ssl_ca_cert = call["ca"]
    if call.get("cert"):
        config.cert_file, config.key_file = call["cert"], call["key"]
    client = openapi_client.ApiClient(config)
    if call.get("token"):
        client.set_default_header("Authorization", f"Bearer {call['token']}")

    operation = call["operation"]
    # The client deserializes JSON only ("Unsupported content type" for the metrics page's
    # application/openmetrics-text): a text answer is read through the method it generates for
    # a raw answer.
    suffix = "_without_preload_content" if call.get("text_answer") else ""
    method = None
    for name in dir(apis):
        cls = getattr(apis, name)
        if isinstance(cls, type) and hasattr(cls, operation):
            method = getattr(cls(client), operation + suffix)
    if method is None:
        raise LookupError(f"the client has no operation {operation}")

    arguments = {}
    for parameter in inspect.signature(method).parameters.values():
        if parameter.name in call["params"]:
            arguments[parameter.name] = call["params"][parameter.name]
        elif call.get("body") is not None and parameter.default is parameter.empty:
            model = parameter.annotation
            if typing.get_origin(model) is typing.Annotated:
                model = typing.get_args(model)[0]
            arguments[parameter.name] = model.from_dict(call["body"])
    result = method(**arguments)
    if suffix:
        if result.status != 200:
            raise RuntimeError(f"{operation} answered {result.status}")
        return result.data.decode()
    return plain(result)


for line in sys.stdin:
    try:
        out = {"answer": answer(json.loads(line))}
    except Exception as error:  # every failure is the answer to this call, not the end
        out = {"error": "".join(traceback.format_exception_only(error)).strip()}
    print(json.dumps(out, default=str), flush=True)
