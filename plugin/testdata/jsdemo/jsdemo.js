// The jsdemo component's exports (jsdemo.wit). A result's err is what a
// function throws; an option's none is undefined.
export function greet(name) {
  return `hello, ${name}`;
}

export function add(a, b) {
  return (a + b) >>> 0;
}

export function summarize(xs) {
  const sum = xs.reduce((s, x) => s + x, 0);
  return { count: xs.length, mean: xs.length ? sum / xs.length : 0 };
}

export function parse(s) {
  if (!/^[0-9]+$/.test(s) || Number(s) > 0xffffffff) {
    throw `not a u32: ${JSON.stringify(s)}`;
  }
  return Number(s);
}

export function first(xs) {
  return xs.length ? xs[0] : undefined;
}

export function boom() {
  throw new Error("boom");
}

export function spin() {
  for (;;) {}
}

// hog keeps mib MiB of ArrayBuffers alive and returns how many it made.
export function hog(mib) {
  const kept = [];
  for (let i = 0; i < mib; i++) {
    kept.push(new Uint8Array(1 << 20).fill(1));
  }
  return kept.length;
}
