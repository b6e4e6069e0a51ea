// E2B's JS tests are written for Vitest 4 (their package.json: vitest ^4.1), which names
// "override the fixtures of this suite" `test.override`; this repository's Vitest 3 has the
// same thing as `test.scoped`. Upstream's `import ... from "vitest"` resolves here
// (js.vitest.config.ts): everything is Vitest's own, and every test made with `extend` also
// answers to `override`. Without it the suites that use it (secure, signing, envVars) fail
// to load and none of their tests run.
import { test as vitestTest } from "vitest";

export * from "vitest";

type Extendable = { extend: (...args: unknown[]) => unknown; scoped?: unknown; override?: unknown };

function withOverride<T>(t: T): T {
  const target = t as unknown as Extendable;
  if (target.override === undefined && target.scoped !== undefined) target.override = target.scoped;
  const extend = target.extend;
  target.extend = function (this: unknown, ...args: unknown[]) {
    return withOverride(extend.apply(this, args));
  };
  return t;
}

export const test = withOverride(vitestTest);
export const it = test;
