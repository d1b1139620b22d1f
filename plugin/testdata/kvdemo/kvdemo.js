// The kvdemo component (kvdemo.wit): wovyr:host's log and kv, each error
// turned into "case: message" for the caller.
import { log } from 'wovyr:host/log@0.1.0';
import { get as kvGet, set as kvSet, delete as kvDelete, keys as kvKeys } from 'wovyr:host/kv@0.1.0';

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

export function remember(key, value) {
  return guard(() => {
    const old = kvGet(key);
    kvSet(key, value);
    return old;
  });
}

export function recall(key) {
  return guard(() => kvGet(key));
}

export function forget(key) {
  return guard(() => kvDelete(key));
}

export function names(prefix) {
  return guard(() => kvKeys(prefix));
}

export function fill(n, size) {
  const value = 'v'.repeat(size);
  for (let i = 0; i < n; i++) {
    try {
      kvSet(`fill-${String(i).padStart(4, '0')}`, value);
    } catch (e) {
      throw `after ${i}: ${explain(e)}`;
    }
  }
  return n;
}

export function shout(n) {
  for (let i = 0; i < n; i++) {
    log('info', `entry ${i}`, [['i', String(i)]]);
  }
  return n;
}
