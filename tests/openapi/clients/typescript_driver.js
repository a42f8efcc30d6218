// One operation through the client openapi-generator (`-g typescript-fetch`) made of a fleetwire
// API document, compiled by tsc, for tests/openapi/generated_clients.py:
// `node typescript_driver.js CLIENT_JS_DIR CALL.json` (CALL.json as python_driver.py's). Prints
// the answer the client read into its model, as JSON; exits 1 with the error otherwise. TLS
// (the fleet CA, a node's client certificate) through undici's dispatcher, which Node's fetch
// takes.
const fs = require("fs");
const path = require("path");
const { Agent, fetch } = require("undici");

async function main() {
  const client = require(path.resolve(process.argv[2], "index.js"));
  const call = JSON.parse(fs.readFileSync(process.argv[3], "utf8"));
  const connect = {};
  if (call.ca) connect.ca = fs.readFileSync(call.ca);
  if (call.cert) {
    connect.cert = fs.readFileSync(call.cert);
    connect.key = fs.readFileSync(call.key);
  }
  const dispatcher = new Agent({ connect });
  const config = new client.Configuration({
    basePath: call.base,
    headers: call.token ? { Authorization: `Bearer ${call.token}` } : {},
    fetchApi: (url, init) => fetch(url, { ...init, dispatcher }),
  });
  const camel = (s) => s.replace(/_([a-z0-9])/g, (_, c) => c.toUpperCase());
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
  const answer = await new Api(config)[operation](request);
  console.log(JSON.stringify(answer === undefined ? null : answer));
}

main().catch(async (err) => {
  let detail = "";
  if (err && err.response) detail = ` ${err.response.status}: ${await err.response.text()}`;
  console.error(`${err}${detail}`);
  process.exit(1);
});
