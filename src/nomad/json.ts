/**
 * JSON text of the Nomad API with its integers kept exact.
 *
 * Nanosecond timestamps (`CreateTime`, `ModifyTime`, `SubmitTime`, `TaskEvent.Time`, ...)
 * are ~1.6e18, above Number.MAX_SAFE_INTEGER, so a plain JSON.parse rounds them
 * (shared/nomad-api/README.md "Encoding"). Node 20's JSON.parse has no access to the source
 * text of a number, so before parsing, integer literals that do not fit a double exactly are
 * wrapped in quotes: they arrive as decimal strings, every other value is unchanged.
 */
export function parseNomadJson(text: string): unknown {
  return JSON.parse(quoteUnsafeIntegers(text));
}

/** Rewrites integer literals outside the safe range as JSON strings; leaves string contents alone. */
export function quoteUnsafeIntegers(text: string): string {
  // Fast path: no run of 16+ digits, nothing can be unsafe.
  if (!/\d{16}/.test(text)) return text;
  let out: string[] | null = null;
  let last = 0;
  let i = 0;
  const n = text.length;
  while (i < n) {
    const c = text.charCodeAt(i);
    if (c === 0x22 /* " */) {
      // Skip the string: jump from quote to quote, a quote preceded by an odd number of
      // backslashes is escaped.
      let q = text.indexOf('"', i + 1);
      while (q > 0) {
        let backslashes = 0;
        while (text.charCodeAt(q - 1 - backslashes) === 0x5c) backslashes++;
        if (backslashes % 2 === 0) break;
        q = text.indexOf('"', q + 1);
      }
      i = q < 0 ? n : q + 1;
      continue;
    }
    if (c === 0x2d /* - */ || (c >= 0x30 && c <= 0x39)) {
      const start = i;
      if (c === 0x2d) i++;
      while (i < n && text.charCodeAt(i) >= 0x30 && text.charCodeAt(i) <= 0x39) i++;
      const next = i < n ? text.charCodeAt(i) : 0;
      const isInteger = next !== 0x2e /* . */ && next !== 0x65 /* e */ && next !== 0x45; /* E */
      if (isInteger && i - start > 15) {
        const literal = text.slice(start, i);
        if (!Number.isSafeInteger(Number(literal))) {
          out ??= [];
          out.push(text.slice(last, start), `"${literal}"`);
          last = i;
        }
      } else if (!isInteger) {
        // fraction / exponent: consume the rest of the number
        while (i < n && isNumberChar(text.charCodeAt(i))) i++;
      }
      continue;
    }
    i++;
  }
  if (!out) return text;
  out.push(text.slice(last));
  return out.join("");
}

function isNumberChar(c: number): boolean {
  return (c >= 0x30 && c <= 0x39) || c === 0x2e || c === 0x65 || c === 0x45 || c === 0x2b || c === 0x2d;
}

/**
 * JSON.stringify that writes bigint values as bare integer literals, the way Nomad writes
 * nanosecond fields. Used for request bodies and by the test emulator.
 */
export function stringifyNomadJson(value: unknown, space?: number): string {
  const marker = "\u0000bigint:";
  const text = JSON.stringify(value, (_key, v: unknown) => (typeof v === "bigint" ? marker + v.toString() : v), space);
  if (text === undefined) return "null";
  return text.includes("\\u0000bigint:") ? text.replace(/"\\u0000bigint:(-?\d+)"/g, "$1") : text;
}
