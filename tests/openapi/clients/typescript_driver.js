// The client openapi-generator (`-g typescript-fetch`) made of a fleetwire API document,
// compiled by tsc, driven by tests/openapi/generated_clients.py:
// `node typescript_driver.js CLIENT_JS_DIR`, then one call a line on stdin and one answer a line
// on stdout, as python_driver.py's ({"answer": …} or {"error": "…"}). TLS (the fleet CA, a
// node's client certificate) through undici's dispatcher, which Node's fetch takes.
const fs = require("fs");
const path = require("path");
const readline = require("readline");
const { Agent, fetch } = require("undici");

const client = require(path.resolve(process.argv[2], "index.js"));
const camel = (s) => s.replace(/_([a-z0-9])/g, (_, c) => c.toUpperCase());

async function answer(call) {
  const connect = {};
  if (call.ca) connect.ca = fs.readFileSync(call.ca);
  if (call.cert) {
    connect.cert = fs.readFileSync(call.cert);
    connect.key = fs.readFileSync(call.key);
  }
  const dispatcher = new Agent({ connect });
  try {
    const config = new client.Configuration({
      basePath: call.base,
      headers: call.token ? { Authorization: `Bearer ${call.token}` } : {},
      fetchApi: (url, init) => fetch(url, { ...init, dispatcher }),
    });
    const operation = camel(call.operation);
    const Api = Object.values(client).find(
      (v) => typeof v === "function" && v.prototype && typeof v.prototype[operation] === "function"
        && v.name.endsWith("Api"),
    );
    if (!Api) throw new Error(`the client has no operation ${operation}`);
    const request = {};
    for (const [name, value] of Object.entries(call.params)) request[camel(name)] = value;
    if (call.body !== null && call.body !== undefined) {
      const type = call.body_type;
      request[type[0].toLowerCase() + type.slice(1)] = client[`${type}FromJSON`](call.body);
    }
    const result = await new Api(config)[operation](request);
    return result === undefined ? null : result;
  } finally {
    await dispatcher.close();
  }
}

async function main() {
  const lines = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
  for await (const line of lines) {
    let out;
    try {
      out = { answer: await answer(JSON.parse(line)) };
    } catch (err) {
      let detail = "";
      if (err && err.response) detail = ` ${err.response.status}: ${await err.response.text()}`;
      out = { error: `${err}${detail}` };
    }
    process.stdout.write(`${JSON.stringify(out)}\n`);
  }
}

main();
