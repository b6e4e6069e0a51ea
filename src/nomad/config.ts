/**
 * Client settings, read from the same environment as the `nomad` CLI so an operator's
 * shell setup works unchanged.
 */
export interface RetryOptions {
  /** Total tries per call, first one included (1 = no retry). */
  attempts: number;
  /** First backoff step (ms); doubles each retry. */
  baseMs: number;
  /** Cap of one backoff step (ms). */
  maxMs: number;
}

export interface NomadClientOptions {
  /** Agent address (NOMAD_ADDR): http://127.0.0.1:4646, https://…, or unix:///path/api.sock. */
  address?: string;
  /** ACL token SecretID, sent as X-Nomad-Token (NOMAD_TOKEN). */
  token?: string;
  /** Namespace for every call (NOMAD_NAMESPACE); Nomad's default is "default". */
  namespace?: string;
  /** Region for every call (NOMAD_REGION); Nomad's default is the agent's own. */
  region?: string;
  /** Path of a PEM CA bundle to verify the agent (NOMAD_CACERT). */
  caCert?: string;
  /** Path of a PEM client certificate for mTLS (NOMAD_CLIENT_CERT). */
  clientCert?: string;
  /** Path of the client certificate's PEM key (NOMAD_CLIENT_KEY). */
  clientKey?: string;
  /** Skip TLS verification (NOMAD_SKIP_VERIFY); for development only. */
  skipVerify?: boolean;
  /** Timeout of one non-blocking request attempt (ms). Blocking queries get wait + margin. */
  timeoutMs?: number;
  retry?: Partial<RetryOptions>;
}

export const DEFAULT_NOMAD_ADDR = "http://127.0.0.1:4646";

/** Options from NOMAD_* variables; `overrides` win field by field. */
export function nomadOptionsFromEnv(env: NodeJS.ProcessEnv = process.env, overrides: NomadClientOptions = {}): NomadClientOptions {
  const fromEnv: NomadClientOptions = {};
  const str = (name: string): string | undefined => {
    const v = env[name];
    return v === undefined || v === "" ? undefined : v;
  };
  const address = str("NOMAD_ADDR");
  if (address) fromEnv.address = address;
  const token = str("NOMAD_TOKEN");
  if (token) fromEnv.token = token;
  const namespace = str("NOMAD_NAMESPACE");
  if (namespace) fromEnv.namespace = namespace;
  const region = str("NOMAD_REGION");
  if (region) fromEnv.region = region;
  const caCert = str("NOMAD_CACERT");
  if (caCert) fromEnv.caCert = caCert;
  const clientCert = str("NOMAD_CLIENT_CERT");
  if (clientCert) fromEnv.clientCert = clientCert;
  const clientKey = str("NOMAD_CLIENT_KEY");
  if (clientKey) fromEnv.clientKey = clientKey;
  const skip = str("NOMAD_SKIP_VERIFY");
  // The nomad CLI parses this with strconv.ParseBool.
  if (skip) fromEnv.skipVerify = ["1", "t", "true", "TRUE", "True"].includes(skip);
  const merged: NomadClientOptions = { ...fromEnv };
  for (const [k, v] of Object.entries(overrides)) {
    if (v !== undefined) (merged as Record<string, unknown>)[k] = v;
  }
  return merged;
}
