// An MCP client nobody in wovyr wrote: the TypeScript SDK's, over stdio
// (spawning `wovyr mcp`) or streamable HTTP (the daemon's /mcp). It prints
// one JSON line of what it saw; mcp_test.go compares it exactly.
//
//   node mcp_client.mjs stdio WOVYR REMOTE TOKEN
//   node mcp_client.mjs http  URL TOKEN
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [mode, ...rest] = process.argv.slice(2);
let transport;
if (mode === "stdio") {
  const [wovyr, remote, token] = rest;
  transport = new StdioClientTransport({
    command: wovyr,
    args: ["mcp", "--remote", remote, "--trust", "trusted"],
    env: { WOVYR_TOKEN: token, PATH: process.env.PATH },
  });
} else {
  const [url, token] = rest;
  transport = new StreamableHTTPClientTransport(new URL(url + "/mcp"), {
    requestInit: { headers: { Authorization: "Bearer " + token } },
  });
}
const client = new Client({ name: "wovyr-ts-test", version: "1.0.0" });
await client.connect(transport);
const tools = (await client.listTools()).tools.map((t) => t.name).sort();
const code = await client.callTool({ name: "run_code", arguments: { language: "python", code: "print(6 * 7)" } });
const cmd = await client.callTool({ name: "run_command", arguments: { argv: ["/bin/echo", "ts"] } });
const bad = await client.callTool({ name: "run_command", arguments: { argv: [] } });
const lang = await client.callTool({ name: "run_code", arguments: { language: "cobol", code: "x" } });
console.log(JSON.stringify({
  server: client.getServerVersion().name,
  tools,
  code: [code.isError ?? false, code.structuredContent.stdout, code.structuredContent.backend],
  cmd: [cmd.isError ?? false, cmd.structuredContent.stdout, cmd.structuredContent.exit_code],
  bad: [bad.isError, bad._meta["wovyr/error"].class],
  lang: [lang.isError, lang._meta["wovyr/error"].class],
}));
await client.close();
