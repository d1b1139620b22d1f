// The fetchdemo component (fetchdemo.wit): wovyr:host/http, each error
// turned into "case: message" for the caller.
import { fetch as hostFetch } from 'wovyr:host/http@0.1.0';

// An import's err arrives thrown, its value in payload.
function explain(e) {
  const p = e && e.payload !== undefined ? e.payload : e;
  if (p && typeof p === 'object' && 'tag' in p) {
    return p.val === undefined ? p.tag : `${p.tag}: ${p.val}`;
  }
  return String(e);
}

function guard(f) {
  try {
    return f();
  } catch (e) {
    throw explain(e);
  }
}

function fetchOnce(url) {
  const r = hostFetch({ method: 'GET', url, headers: [['x-plugin', 'fetchdemo']], body: new Uint8Array(0) });
  return `${r.status} ${new TextDecoder().decode(r.body)}`;
}

export function get(url) {
  return guard(() => fetchOnce(url));
}

export function burst(url, n) {
  const out = [];
  for (let i = 0; i < n; i++) {
    try {
      out.push(fetchOnce(url).split(' ')[0]);
    } catch (e) {
      out.push(explain(e));
    }
  }
  return out;
}
