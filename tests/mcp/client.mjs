// A client of agentbox's MCP server on the TypeScript MCP SDK, over
// streamable HTTP: run by tests/e2e/mcp_test.go as
//
//   node client.mjs URL TOKEN NAME IMAGE
//
// It lists the tools, creates sandbox NAME from image directory IMAGE, runs commands (with progress),
// round-trips a binary file, lists a directory, reads the console
// resource, then ends its session (DELETE), which the server's
// --mcp-cleanup answers by removing the sandbox. It prints one JSON object
// with what it saw on stdout; the Go test asserts on it. A second session
// with a wrong token must be refused.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [url, token, name, image] = process.argv.slice(2);
if (!url || !token || !name || !image) {
  console.error("usage: node client.mjs URL TOKEN NAME IMAGE");
  process.exit(2);
}

function connect(tok) {
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { Authorization: `Bearer ${tok}` } },
  });
  const client = new Client({ name: "agentbox-e2e", version: "1.0.0" });
  return { client, transport };
}

// call returns a tool's structured answer, or throws its error text.
async function call(client, tool, args, options) {
  const res = await client.callTool({ name: tool, arguments: args }, undefined, options);
  if (res.isError) {
    throw new Error(`${tool}: ${res.content.map((c) => c.text).join("")}`);
  }
  return res.structuredContent;
}

const out = {};
const wrong = connect(token + "x");
try {
  await wrong.client.connect(wrong.transport);
  out.wrongToken = "accepted";
} catch (e) {
  out.wrongToken = String(e.message);
}

const { client, transport } = connect(token);
await client.connect(transport);
out.tools = (await client.listTools()).tools.map((t) => t.name).sort();

const sb = await call(client, "create_sandbox", { name, image });
out.sandbox = { id: sb.id, name: sb.name, state: sb.state, session: sb.labels["agentbox.mcp-session"] };
out.sessionId = transport.sessionId;

let progress = 0;
out.run = await call(
  client,
  "run_command",
  { sandbox: name, command: "for i in 1 2 3; do echo tick $i; sleep 1; done; echo done >&2; exit 5" },
  { onprogress: () => { progress++; }, timeout: 120000 },
);
out.progress = progress;
out.argv = await call(client, "run_command", { sandbox: sb.id, argv: ["printf", "%s|", "a b", "c"] });

const bin = Buffer.alloc(65536);
for (let i = 0; i < bin.length; i++) bin[i] = (i * 7 + (i >> 8)) & 0xff;
const written = await call(client, "write_file", {
  sandbox: name, path: "/tmp/mcp/bin.dat", content: bin.toString("base64"), encoding: "base64", parents: true,
});
const read = await call(client, "read_file", { sandbox: name, path: "/tmp/mcp/bin.dat" });
out.file = {
  written: written.size,
  encoding: read.encoding,
  equal: Buffer.from(read.content, "base64").equals(bin),
};
const dir = await call(client, "list_directory", { sandbox: name, path: "/tmp/mcp" });
out.dir = dir.entries.map((e) => `${e.name} ${e.type} ${e.size}`);

const missing = await client.callTool({ name: "run_command", arguments: { sandbox: "no-such-box", command: "true" } });
out.missing = { isError: missing.isError, text: missing.content.map((c) => c.text).join("") };

const console_ = await client.readResource({ uri: `agentbox://sandboxes/${name}/console` });
out.consoleBytes = console_.contents[0].text.length;

await transport.terminateSession();
await client.close();
console.log(JSON.stringify(out));
