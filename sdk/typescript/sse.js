// A reader of server-sent events (text/event-stream) from a fetch body.
// The daemon writes `id: N`, `event: TYPE`, `data: JSON` and a blank line
// per event, and comment lines (": keepalive") while idle.

/**
 * Yields each event's {id, event, data} from body, in order.
 * @param {ReadableStream<Uint8Array>} body
 * @returns {AsyncGenerator<{id: string, event: string, data: string}>}
 */
export async function* readEvents(body) {
  const decoder = new TextDecoder();
  let buf = "";
  let ev = { id: "", event: "", data: "" };
  for await (const chunk of body) {
    buf += decoder.decode(chunk, { stream: true });
    let nl;
    while ((nl = buf.indexOf("\n")) >= 0) {
      const line = buf.slice(0, nl).replace(/\r$/, "");
      buf = buf.slice(nl + 1);
      if (line === "") {
        if (ev.event || ev.data) yield ev;
        ev = { id: "", event: "", data: "" };
        continue;
      }
      if (line.startsWith(":")) continue;
      const colon = line.indexOf(":");
      const key = colon < 0 ? line : line.slice(0, colon);
      let value = colon < 0 ? "" : line.slice(colon + 1);
      if (value.startsWith(" ")) value = value.slice(1);
      if (key === "data") ev.data = ev.data ? ev.data + "\n" + value : value;
      else if (key === "id" || key === "event") ev[key] = value;
    }
  }
}
