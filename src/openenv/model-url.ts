import { OpenEnvError } from "./errors.js";

/** One allowed model endpoint, normalized: scheme, host, port, and a path prefix (whole segments). */
interface AllowedPrefix {
  protocol: string;
  hostname: string;
  port: string;
  path: string;
  text: string;
}

/** A model URL the operator did not allow: refused before any connection is opened (HTTP 403). */
export class ModelUrlRefusedError extends OpenEnvError {
  override name = "ModelUrlRefusedError";
  constructor(message: string) {
    super("VALIDATION_ERROR", message);
  }
}

/** An `--model-url-allow` prefix that is not an http(s) URL. */
export class ModelUrlAllowError extends OpenEnvError {
  override name = "ModelUrlAllowError";
  constructor(message: string) {
    super("VALIDATION_ERROR", message);
  }
}

const defaultPort = (protocol: string) => (protocol === "https:" ? "443" : "80");

/**
 * Which model endpoints POST /run may call (`--model-url-allow PREFIX`, repeatable): a
 * `model.base_url` must have the scheme, host and port of an allowed prefix and a path that
 * is the prefix's path or below it (segment by segment: `/v1` allows `/v1/...`, not `/v10`).
 * URLs are compared after WHATWG parsing (`..`, case, default ports normalized), and a URL
 * with a user name or password is refused. None allowed: /run refuses every model URL, so a
 * server never POSTs to a host a client names (it once reached its own sandbox server).
 */
export class ModelUrlPolicy {
  private readonly allowed: AllowedPrefix[];

  constructor(prefixes: readonly string[]) {
    this.allowed = prefixes.map((p) => {
      let u: URL;
      try {
        u = new URL(p);
      } catch {
        throw new ModelUrlAllowError(`--model-url-allow ${JSON.stringify(p)} is not a URL: give a prefix such as http://127.0.0.1:8000/v1`);
      }
      if (u.protocol !== "http:" && u.protocol !== "https:") throw new ModelUrlAllowError(`--model-url-allow ${p}: only http and https endpoints can be allowed`);
      if (u.username || u.password) throw new ModelUrlAllowError(`--model-url-allow ${p}: put no credentials in the URL (the request's model.api_key carries them)`);
      return { protocol: u.protocol, hostname: u.hostname, port: u.port || defaultPort(u.protocol), path: u.pathname.replace(/\/+$/, ""), text: p };
    });
  }

  get enabled(): boolean {
    return this.allowed.length > 0;
  }

  /** Throws ModelUrlRefusedError unless `url` lies under an allowed prefix. */
  check(url: string): void {
    if (this.allowed.length === 0) {
      throw new ModelUrlRefusedError(`POST /run is off on this server: it calls only model endpoints its operator allowed, and none is (start it with --model-url-allow PREFIX, e.g. --model-url-allow http://127.0.0.1:8000/v1)`);
    }
    let u: URL;
    try {
      u = new URL(url);
    } catch {
      throw new ModelUrlRefusedError(`model.base_url ${JSON.stringify(url)} is not a URL`);
    }
    if (u.username || u.password) throw new ModelUrlRefusedError(`model.base_url must not carry a user name or password (send model.api_key)`);
    const port = u.port || defaultPort(u.protocol);
    const path = u.pathname.replace(/\/+$/, "");
    const ok = this.allowed.some((a) => a.protocol === u.protocol && a.hostname === u.hostname && a.port === port && (path === a.path || path.startsWith(`${a.path}/`)));
    if (!ok) throw new ModelUrlRefusedError(`model.base_url ${u.origin}${u.pathname} is not an endpoint this server may call; allowed (--model-url-allow): ${this.allowed.map((a) => a.text).join(", ")}`);
  }
}
