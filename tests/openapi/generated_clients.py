"""Client generators fed fleetwire's OpenAPI documents, as a user would (issue 31; docs/interop.md,
"OpenAPI consumers"), then the clients they made calling a live controller.

Generators, each pinned: openapi-python-client and openapi-generator (`-g python`,
`-g typescript-fetch`, `-g go`) from tests/openapi/requirements.txt (openapi-generator-cli
bundles the jar; it runs on Java, Debian's default-jre-headless); progenitor (Rust, from the 3.0
documents) in tests/openapi/progenitor, a crate outside the workspace built with its own lock
file. Fails when a generator stops, warns, or leaves out an operation of a document.

With --fleetwire BIN, the clients made of the controller's two documents (3.0 and 3.1; progenitor
3.0 only) then call every operation of a live fleet (`BIN up`, mTLS and --plain-http) and read
every answer into their models: operator routes with the operator token, registration with a
bootstrap token and the node's CSR, the heartbeat with the certificate the controller signed
(tests/openapi/clients/ has the drivers; TypeScript is compiled by tsc and runs on Node with
undici, both pinned below, installed under the cache folder; Go is Debian's golang-go).

Usage: generated_clients.py OUT_DIR [--fleetwire BIN] [--cache DIR]
(run with the venv's python; generators come from its bin/)
"""

import argparse
import hashlib
import json
import os
import re
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORKSPACE = Path(__file__).resolve().parents[2]
CLIENTS = Path(__file__).resolve().parent / "clients"
DOCUMENTS = {
    "fleet-3.0": WORKSPACE / "generated/openapi/fleet-api.json",
    "fleet-3.1": WORKSPACE / "generated/openapi/fleet-api.3.1.json",
    "agent-3.0": WORKSPACE / "generated/openapi/agent-api.json",
    "agent-3.1": WORKSPACE / "generated/openapi/agent-api.3.1.json",
}
BIN = Path(sys.executable).parent
# The npm packages the TypeScript client needs: tsc to compile it, undici for TLS options on
# Node's fetch.
NPM_PACKAGES = ["typescript@5.9.3", "undici@6.29.0"]
OPENAPI_GENERATOR_TARGETS = ["python", "typescript-fetch", "go"]
# The metrics page's media type is text; openapi-python-client reads only the types it lists,
# so it is told what that one is (its `content_type_overrides`, not a change of the document).
PYTHON_CLIENT_CONFIG = {
    "content_type_overrides": {
        "application/openmetrics-text; version=1.0.0; charset=utf-8": "text/plain",
        "application/openmetrics-text": "text/plain",
    }
}
# Warnings openapi-generator 7.26.0 prints that name no part of the documents, allowed by their
# exact text so that any other warning fails: on every 3.1 document, with every target, the
# generator's own 3.1 support announcing itself as beta.
OPENAPI_GENERATOR_KNOWN = {
    "OpenAPI 3.1 support is still in beta. To report an issue related to 3.1 spec, please kindly "
    "open an issue in the Github repo: https://github.com/openAPITools/openapi-generator.",
}
# `-g python` only: its toDefaultValue asks for the reference of every schema it makes a
# property of (a field, an answer, a parameter) and warns for each that is none, so no document
# with a schema avoids it. PYTHON_NULL_REF, one answer of type string, shows that; the check
# fails once it no longer warns there. From the other targets the same text fails: the parts of
# the documents that caused it there are gone (docs/interop.md, "OpenAPI consumers").
OPENAPI_GENERATOR_PYTHON_KNOWN = {"Failed to get the schema name: null"}
PYTHON_NULL_REF = Path(__file__).resolve().parent / "openapi_generator_python_null_ref.json"

failures = []
# Where kept generations live (`--cache`): a generator's output is a function of the document,
# the generator's pinned version and its options, so a run whose document did not change since
# a kept one copies that one instead of starting the JVM again (.ci/run keeps its cache between
# runs); its log is read again, so a warning fails as it did. Set in main().
CACHE = None


def generate_once(target: Path, log: Path, args: list, document: Path, extra: str = "") -> str:
    """`run(args)` writing `target`, or its kept result when the same document went through the
    same pinned generator with the same arguments before."""
    key = hashlib.sha256()
    for part in (document.read_bytes(), (WORKSPACE / "tests/openapi/requirements.txt").read_bytes(),
                 json.dumps([str(a) for a in args[1:] if not str(a).startswith("/")]).encode(),
                 target.name.encode(), extra.encode()):
        key.update(hashlib.sha256(part).digest())
    kept = CACHE / "generated-clients" / key.hexdigest()[:32] if CACHE else None
    if kept is not None and (kept / "done").exists():
        shutil.copytree(kept / "target", target, dirs_exist_ok=True)
        text = (kept / "log").read_text()
        log.write_text(text)
        code = int((kept / "done").read_text() or "0")
        if code != 0:
            failures.append(f"{' '.join(map(str, args[:3]))}… exited {code} (log: {log}, kept)")
        return text
    before = len(failures)
    text = run(args, log)
    if kept is not None and target.exists():
        shutil.rmtree(kept, ignore_errors=True)
        kept.mkdir(parents=True)
        shutil.copytree(target, kept / "target")
        (kept / "log").write_text(text)
        (kept / "done").write_text("1" if len(failures) > before else "0")
    return text


def operations(doc: dict) -> set:
    return {
        op["operationId"]
        for item in doc["paths"].values()
        for method, op in item.items()
        if method in ("get", "put", "post", "delete", "patch")
    }


def snake(name: str) -> str:
    return re.sub(r"(?<!^)([A-Z])", r"_\1", name).lower()


def run(args: list, log: Path, env: dict = None, cwd: Path = None) -> str:
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", **(env or {}))
    result = subprocess.run([str(a) for a in args], capture_output=True, text=True, env=env,
                            cwd=cwd)
    text = result.stdout + result.stderr
    log.write_text(text)
    if result.returncode != 0:
        failures.append(f"{' '.join(map(str, args[:3]))}… exited {result.returncode} (log: {log})")
    return text


def python_client(name: str, document: Path, doc: dict, out: Path) -> None:
    config = out / f"{name}.openapi-python-client.json"
    config.write_text(json.dumps(PYTHON_CLIENT_CONFIG))
    target = out / f"{name}-openapi-python-client"
    log = out / f"{name}-openapi-python-client.log"
    text = generate_once(target, log, [BIN / "openapi-python-client", "generate", "--path", document,
                         "--output-path", target, "--config", config, "--overwrite"], document,
                         json.dumps(PYTHON_CLIENT_CONFIG))
    if "Warning" in text or "Unable to" in text:
        failures.append(f"openapi-python-client warned on {document.name} (log: {log})")
    made = {p.stem for p in target.glob("*/api/*/*.py") if p.stem != "__init__"}
    report(f"openapi-python-client {name}", operations(doc), made)


def made_by_openapi_generator(generator: str, target: Path) -> set:
    """The operations the generated client has, by the generator's own naming."""
    made = set()
    if generator == "python":
        for api in target.glob("openapi_client/api/*_api.py"):
            made |= set(re.findall(r"^    def ([a-z0-9_]+)\(", api.read_text(), re.M))
    elif generator == "typescript-fetch":
        for api in target.glob("apis/*.ts"):
            made |= {snake(m) for m in re.findall(r"^    async (\w+)\(", api.read_text(), re.M)
                     if not m.endswith("Raw")}
    elif generator == "go":
        for api in target.glob("api_*.go"):
            made |= {snake(m) for m in
                     re.findall(r"^func \(a \*\w+APIService\) (\w+)\(ctx", api.read_text(), re.M)}
    return made


def openapi_generator(name: str, document: Path, doc: dict, out: Path, generator: str) -> None:
    target = out / f"{name}-openapi-generator-{generator}"
    log = out / f"{name}-openapi-generator-{generator}.log"
    # Go's enum constants are package-wide: without the type's name as their prefix, two enums
    # with a value in common (HostState's and NodeStatusFilter's `ready`) do not compile.
    options = ["--additional-properties=enumClassPrefix=true"] if generator == "go" else []
    text = generate_once(target, log, [BIN / "openapi-generator-cli", "generate", "-g", generator,
                                       "-i", document, "-o", target, *options], document)
    warnings = [re.sub(r"^.*? - ", "", line) for line in text.splitlines() if " WARN " in line]
    known = OPENAPI_GENERATOR_KNOWN | (OPENAPI_GENERATOR_PYTHON_KNOWN if generator == "python"
                                       else set())
    unknown = [w for w in warnings if w not in known]
    if unknown:
        failures.append(f"openapi-generator {generator} warned on {document.name}: {unknown} "
                        f"(log: {log})")
    made = made_by_openapi_generator(generator, target)
    report(f"openapi-generator {generator} {name}", operations(doc), made & operations(doc),
           f", {len(warnings) - len(unknown)} known warning(s)")


def python_warning_still_needed(out: Path) -> None:
    """OPENAPI_GENERATOR_PYTHON_KNOWN holds only while `-g python` still warns so on
    PYTHON_NULL_REF, a document with nothing that the other targets warn about."""
    target = out / "python-null-ref-openapi-generator-python"
    log = out / "python-null-ref-openapi-generator-python.log"
    text = generate_once(target, log, [BIN / "openapi-generator-cli", "generate", "-g", "python",
                                       "-i", PYTHON_NULL_REF, "-o", target], PYTHON_NULL_REF)
    warnings = {re.sub(r"^.*? - ", "", line) for line in text.splitlines() if " WARN " in line}
    if not OPENAPI_GENERATOR_PYTHON_KNOWN <= warnings:
        failures.append(f"openapi-generator python no longer warns on {PYTHON_NULL_REF.name}: drop "
                        f"OPENAPI_GENERATOR_PYTHON_KNOWN and its paragraph in docs/interop.md "
                        f"(log: {log})")


def progenitor(out: Path, cache: Path):
    """Builds tests/openapi/progenitor (both 3.0 documents through progenitor); its binary, or
    None when the build failed (a failure is recorded)."""
    crate = WORKSPACE / "tests/openapi/progenitor"
    target_dir = cache / "progenitor-target"
    log = out / "progenitor.log"
    before = len(failures)
    text = run(["cargo", "build", "--locked", "--manifest-path", crate / "Cargo.toml"], log,
               env={"CARGO_TARGET_DIR": str(target_dir)})
    if len(failures) > before:
        why = [line.strip() for line in text.splitlines()
               if "panicked" in line or "assertion" in line or line.startswith("error")]
        failures[-1] += f": {why[:3]}"
        return None
    warned = [line for line in text.splitlines() if line.startswith("warning")]
    if warned:
        failures.append(f"progenitor's clients build with warnings: {warned[:5]} (log: {log})")
    for name, file in (("fleet-3.0", "fleet_api.rs"), ("agent-3.0", "agent_api.rs")):
        made_files = sorted(target_dir.glob(f"debug/build/fleetwire-progenitor-check-*/out/{file}"),
                            key=lambda p: p.stat().st_mtime)
        made = set()
        if made_files:
            made = set(re.findall(r"pub fn (\w+)\(&self\)", made_files[-1].read_text()))
        doc = json.loads(DOCUMENTS[name].read_text())
        report(f"progenitor {name}", operations(doc), made & operations(doc))
    return target_dir / "debug/fleetwire-progenitor-check"


def report(what: str, wanted: set, made: set, extra: str = "") -> None:
    missing = sorted(wanted - made)
    print(f"{what}: {len(made & wanted)} of {len(wanted)} operations{extra}")
    if missing:
        failures.append(f"{what} left out {missing}")


# ---- the clients against a live fleet ------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Fleet:
    """`fleetwire up` in a temporary directory."""

    def __init__(self, binary: Path, secure: bool):
        self.secure = secure
        self.dir = Path(tempfile.mkdtemp(prefix="fw-clients-"))
        port = free_port()
        args = [str(binary), "up", "--listen", f"127.0.0.1:{port}",
                "--spawn-port", str(free_port()), "--heartbeat-interval", "1"]
        if not secure:
            args.append("--plain-http")
        self.log = open(self.dir / "up.out", "w+")
        self.process = subprocess.Popen(args, cwd=self.dir, stdout=self.log,
                                        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.base = f"{'https' if secure else 'http'}://127.0.0.1:{port}"
        deadline = time.time() + 90
        while "fleetwire is up" not in (self.dir / "up.out").read_text():
            if time.time() > deadline or self.process.poll() is not None:
                raise SystemExit(f"fleetwire up did not come up:\n{(self.dir / 'up.out').read_text()}")
            time.sleep(0.2)
        state = self.dir / ".fleetwire"
        self.ca = str(state / "controller/ca/ca.pem") if secure else None
        self.token = (state / "operator-token").read_text().strip() if secure else None

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


def csr(node: str, folder: Path) -> str:
    key = folder / f"{node}.key"
    made = subprocess.run(
        ["openssl", "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
         "-nodes", "-keyout", key, "-subj", f"/CN={node}", "-addext",
         f"subjectAltName=DNS:{node}"], capture_output=True, text=True, check=True)
    return made.stdout


def body_type(doc: dict, operation: str):
    for item in doc["paths"].values():
        for op in item.values():
            if isinstance(op, dict) and op.get("operationId") == operation:
                ref = (op.get("requestBody", {}).get("content", {}).get("application/json", {})
                       .get("schema", {}).get("$ref"))
                return ref.rsplit("/", 1)[-1] if ref else None
    return None


def text_answer(doc: dict, operation: str) -> bool:
    """Whether the operation's success answer is text (the metrics page), not JSON."""
    for item in doc["paths"].values():
        for op in item.values():
            if isinstance(op, dict) and op.get("operationId") == operation:
                return any(not any("json" in m for m in r.get("content", {}))
                           and r.get("content") for s, r in op["responses"].items()
                           if s.startswith("2"))
    return False


# The operations in the order a client needs them, with who calls and what: (operation, caller,
# path parameters, body). The caller is `open`, `operator`, `bootstrap` (the token minted just
# before) or `node` (the certificate signed at registration).
def plan(node: str, vm: str, spawn_port: int) -> list:
    return [
        ("get_healthz", "open", {}, None),
        ("get_readyz", "open", {}, None),
        ("get_metrics", "operator", {}, None),
        ("create_bootstrap_token", "operator", {}, {"node_id": node}),
        ("register_node", "bootstrap", {}, {
            "node_id": node, "hostname": node, "wg_ip": "127.0.0.1", "spawn_port": spawn_port,
            "runtime": "process", "total_cpus": 1, "total_memory_mb": 1024, "total_disk_gb": 1,
            "kvm_available": False}),
        ("post_heartbeat", "node", {}, {
            "node_id": node, "wg_ip": "127.0.0.1", "hostname": node, "spawn_port": spawn_port,
            "ram_total_mb": 1024, "ram_used_mb": 0, "cpu_cores": 1, "cpu_load_pct": 0.0,
            "kvm_available": False, "vms": [], "boot_id": f"{node}-boot",
            "timestamp_utc": "2026-12-03T12:00:00Z"}),
        ("list_nodes", "operator", {}, None),
        ("get_node", "operator", {"node_id": node}, None),
        ("cordon_node", "operator", {"node_id": node}, None),
        ("uncordon_node", "operator", {"node_id": node}, None),
        ("drain_node", "operator", {"node_id": node}, None),
        ("get_fleet", "operator", {}, None),
        ("create_vm", "operator", {}, {"vm_id": vm, "vm_type": "process", "ram_mb": 64,
                                       "vcpu_count": 1, "command": ["/bin/sleep", "600"]}),
        ("list_vms", "operator", {}, None),
        ("get_vm", "operator", {"vm_id": vm}, None),
        ("get_vm_logs", "operator", {"vm_id": vm}, None),
        ("delete_vm", "operator", {"vm_id": vm}, None),
        ("delete_node", "operator", {"node_id": node}, None),
    ]


class Driver:
    """A client's driver (tests/openapi/clients/), one process for a whole plan: a call a line
    on its stdin, an answer a line on its stdout ({"answer": …} or {"error": "…"}). Starting a
    process for each call cost most of this step (docs/interop.md)."""

    def __init__(self, command: list, log: Path):
        self.log = open(log, "w")
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=self.log, text=True)

    def call(self, call: dict, timeout: float = 120) -> dict:
        line = ""
        if self.process.poll() is None and not self.process.stdin.closed:
            try:
                self.process.stdin.write(json.dumps(call) + "\n")
                self.process.stdin.flush()
                ready, _, _ = select.select([self.process.stdout], [], [], timeout)
                line = self.process.stdout.readline() if ready else ""
            except BrokenPipeError:
                pass
        if not line:
            self.close()
            return {"error": f"the driver gave no answer within {timeout:.0f} s "
                             f"(exit {self.process.poll()}; its errors: {self.log.name})"}
        return json.loads(line)

    def close(self) -> None:
        if self.process.poll() is None and not self.process.stdin.closed:
            self.process.stdin.close()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
        if not self.log.closed:
            self.log.close()


def live(fleet: Fleet, client: str, driver: list, doc: dict, folder: Path) -> None:
    mode = "mTLS" if fleet.secure else "plain"
    node = re.sub(r"[^a-z0-9-]", "-", f"gc-{client}-{mode}".lower())
    steps = plan(node, f"vm-{node}", free_port())
    missing = operations(doc) - {s[0] for s in steps}
    if missing:
        failures.append(f"operations no client calls (add them to the plan): {sorted(missing)}")
    bootstrap, cert = None, None
    called = 0
    process = Driver(driver, folder / f"{node}-driver.log")
    try:
        for operation, caller, params, body in steps:
            call = {"operation": operation, "base": fleet.base, "ca": fleet.ca, "token": None,
                    "cert": None, "key": None, "params": params, "body": body,
                    "body_type": body_type(doc, operation),
                    "text_answer": text_answer(doc, operation)}
            if fleet.secure:
                if caller == "operator":
                    call["token"] = fleet.token
                elif caller == "bootstrap":
                    call["token"] = bootstrap
                    call["body"] = dict(body, csr_pem=csr(node, folder))
                elif caller == "node":
                    call["cert"], call["key"] = str(cert), str(folder / f"{node}.key")
            out = process.call(call)
            if "error" in out:
                failures.append(f"{client} ({mode}) {operation}: {str(out['error'])[-800:]}")
                continue
            called += 1
            answer = out["answer"]
            if operation == "create_bootstrap_token":
                bootstrap = answer.get("token")
            elif operation == "register_node" and fleet.secure:
                cert = folder / f"{node}.crt"
                cert.write_text(answer.get("cert_pem") or answer.get("certPem") or "")
    finally:
        process.close()
    print(f"{client} on the {mode} fleet: {called} of {len(steps)} operations answered and read")


def build_typescript(target: Path, npm: Path, log: Path) -> Path:
    (target / "tsconfig.json").write_text(json.dumps({"compilerOptions": {
        "target": "es2020", "module": "commonjs", "lib": ["es2020", "dom"], "outDir": "js",
        "strict": False, "skipLibCheck": True, "esModuleInterop": True}, "include": ["**/*.ts"],
        "exclude": ["js", "node_modules"]}))
    text = run(["node", npm / "node_modules/typescript/bin/tsc", "-p", target], log)
    if text.strip():
        failures.append(f"tsc on {target.name}: {text.strip()[:800]}")
    return target / "js"


def build_go(target: Path, name: str, doc: dict, out: Path) -> Path:
    """A driver program for the Go client: a switch over its operations, written from the
    generated package's own signatures."""
    text = "\n".join(p.read_text() for p in sorted(target.glob("api_*.go")))
    cases = []
    for service, method in re.findall(r"^func \(a \*(\w+)APIService\) (\w+)\(ctx", text, re.M):
        params = re.search(rf"^func \(a \*{service}APIService\) {method}\(ctx context.Context((?:, \w+ \w+)*)\)",
                           text, re.M).group(1)
        args = "".join(f', param(call, "{snake(n)}")' for n in re.findall(r", (\w+) string", params))
        setters = re.findall(rf"^func \(r Api{method}Request\) (\w+)\((\w+) (\w+)\) Api{method}Request",
                             text, re.M)
        body = ""
        for setter, _, ty in setters:
            if ty == body_type(doc, snake(method)):
                body = (f"\n\t\tvar b openapi.{ty}\n"
                        f"\t\tif err := json.Unmarshal(call.Body, &b); err != nil {{\n"
                        f"\t\t\treturn nil, err\n\t\t}}\n"
                        f"\t\trequest = request.{setter}(b)")
        returns = re.search(rf"^func \(a \*{service}APIService\) {method}Execute\(r Api{method}Request\) \(([^)]*)\)",
                            text, re.M).group(1)
        if returns.count(",") == 2:
            call_line = "answer, _, err := request.Execute()\n\t\treturn answer, err"
        else:
            call_line = "_, err := request.Execute()\n\t\treturn nil, err"
        cases.append(f'\tcase "{snake(method)}":\n\t\trequest := client.{service}API.{method}(ctx{args}){body}\n\t\t{call_line}')
    driver = out / f"{name}-go-driver"
    shutil.rmtree(driver, ignore_errors=True)
    driver.mkdir()
    (driver / "main.go").write_text((CLIENTS / "go_driver.go.txt").read_text().replace(
        "\t// CASES\n", "\n".join(cases) + "\n"))
    (driver / "go.mod").write_text(
        f"module driver\n\ngo 1.19\n\nrequire github.com/GIT_USER_ID/GIT_REPO_ID v0.0.0\n\n"
        f"replace github.com/GIT_USER_ID/GIT_REPO_ID => {target}\n")
    # The generated go.mod requires what its own tests use; the client needs the standard library
    # only, and this machine has no module proxy.
    (target / "go.mod").write_text("module github.com/GIT_USER_ID/GIT_REPO_ID\n\ngo 1.19\n")
    shutil.rmtree(target / "test", ignore_errors=True)
    log = out / f"{name}-go-build.log"
    built = run(["go", "build", "-o", driver / "driver", "."], log, cwd=driver,
                env={"GOFLAGS": "-mod=mod", "GOPROXY": "off", "GOTOOLCHAIN": "local",
                     "GOCACHE": str(CACHE / "go-cache"), "GOPATH": str(out / "go-path")})
    if built.strip():
        failures.append(f"go build of the {name} client: {built.strip()[:800]}")
    return driver / "driver"


def live_clients(binary: Path, out: Path, cache: Path, progenitor_bin) -> None:
    npm = cache / "npm-clients"
    if not all((npm / "node_modules" / p.split("@")[0]).exists() for p in NPM_PACKAGES):
        run(["npm", "install", "--silent", "--no-audit", "--no-fund", "--prefix", npm,
             *NPM_PACKAGES], out / "npm.log")
    drivers = {}
    for name in ("fleet-3.0", "fleet-3.1"):
        doc = json.loads(DOCUMENTS[name].read_text())
        drivers[f"python-{name}"] = (doc, [sys.executable, CLIENTS / "python_driver.py",
                                           out / f"{name}-openapi-generator-python"])
        js = build_typescript(out / f"{name}-openapi-generator-typescript-fetch", npm,
                              out / f"{name}-tsc.log")
        drivers[f"typescript-{name}"] = (doc, ["node", CLIENTS / "typescript_driver.js", js])
        drivers[f"go-{name}"] = (doc, [build_go(out / f"{name}-openapi-generator-go", name, doc, out)])
    if progenitor_bin is not None:
        drivers["progenitor-fleet-3.0"] = (json.loads(DOCUMENTS["fleet-3.0"].read_text()),
                                           [progenitor_bin])
    env_path = os.environ.get("NODE_PATH", "")
    os.environ["NODE_PATH"] = f"{npm / 'node_modules'}{os.pathsep}{env_path}"
    for secure in (True, False):
        fleet = Fleet(binary, secure)
        try:
            folder = Path(tempfile.mkdtemp(prefix="fw-calls-"))
            for client, (doc, driver) in drivers.items():
                live(fleet, client, [str(d) for d in driver], doc, folder)
        finally:
            fleet.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--fleetwire", help="the fleetwire binary, for the live calls")
    parser.add_argument("--cache", default=os.environ.get("FLEETWIRE_CI_CACHE",
                                                          str(WORKSPACE / "target")))
    args = parser.parse_args()
    started = time.time()
    out = Path(args.out).resolve()
    cache = Path(args.cache).resolve()
    global CACHE
    CACHE = cache
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    if shutil.which("java") is None:
        print("generated_clients: openapi-generator needs Java: apt-get install default-jre-headless",
              file=sys.stderr)
        return 1
    for name, document in DOCUMENTS.items():
        doc = json.loads(document.read_text())
        python_client(name, document, doc, out)
        for generator in OPENAPI_GENERATOR_TARGETS:
            openapi_generator(name, document, doc, out, generator)
    python_warning_still_needed(out)
    progenitor_bin = None
    if shutil.which("cargo"):
        progenitor_bin = progenitor(out, cache)
    else:
        failures.append("progenitor needs cargo")
    print(f"generation took {time.time() - started:.0f} s")
    if args.fleetwire:
        live_started = time.time()
        live_clients(Path(args.fleetwire).resolve(), out, cache, progenitor_bin)
        print(f"the live calls took {time.time() - live_started:.0f} s")
    for f in failures:
        print(f"FAIL: {f}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
