// What a machine with systemd-resolved (or a browser) does for E2B's tests: every
// `*.localhost` name is 127.0.0.1. slotpool e2b-server hands sandboxes the domain
// `e2b.localhost:<its HTTPS port>`, so `https://${sandbox.getHost(port)}` in E2B's tests reaches
// it; glibc alone does not resolve `<port>-<id>.localhost`. Loaded into every test worker
// (js.vitest.config.ts setupFiles): an adaptation of where the tests point, not of a test.
import dns from "node:dns";

type Callback = (err: NodeJS.ErrnoException | null, address: string | dns.LookupAddress[], family?: number) => void;
const lookup = dns.lookup;
(dns as { lookup: unknown }).lookup = function (host: string, options: unknown, cb?: Callback) {
  const callback = (typeof options === "function" ? options : cb) as Callback;
  const opts = (typeof options === "function" ? {} : typeof options === "number" ? { family: options } : (options ?? {})) as dns.LookupOptions;
  if (typeof host === "string" && /(^|\.)localhost$/i.test(host)) {
    process.nextTick(() => (opts.all ? callback(null, [{ address: "127.0.0.1", family: 4 }]) : callback(null, "127.0.0.1", 4)));
    return;
  }
  return (lookup as (...a: unknown[]) => unknown).call(dns, host, options, cb);
};
