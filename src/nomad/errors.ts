import { SlotpoolError } from "../protocol/errors.js";

/**
 * Typed failures of the Nomad HTTP API. Nomad answers errors as plain text (the whole body
 * is the message, see shared/nomad-api/README.md "Errors are plain text"), so every error
 * keeps that text verbatim next to a hint saying what to check.
 */
export class NomadError extends SlotpoolError {
  override name = "NomadError";
  /** HTTP status, or 0 when no answer came back. */
  readonly status: number;
  readonly method: string;
  readonly path: string;
  /** Nomad's own message (the plain-text body), trimmed. */
  readonly nomadMessage: string;

  constructor(
    init: { status: number; method: string; path: string; nomadMessage: string },
    message?: string,
    options?: { cause?: unknown },
  ) {
    super(
      message ?? `Nomad ${init.method} ${init.path} failed with ${init.status}: ${init.nomadMessage || "(empty body)"}`,
      options,
    );
    this.status = init.status;
    this.method = init.method;
    this.path = init.path;
    this.nomadMessage = init.nomadMessage;
  }
}

/** No HTTP answer at all: connection refused, DNS, TLS handshake, reset. */
export class NomadUnreachableError extends NomadError {
  override name = "NomadUnreachableError";
  constructor(init: { method: string; path: string; address: string; reason: string }, options?: { cause?: unknown }) {
    super(
      { status: 0, method: init.method, path: init.path, nomadMessage: "" },
      `cannot reach Nomad at ${init.address} (${init.method} ${init.path}): ${init.reason}; ` +
        "check NOMAD_ADDR, that the agent runs, and the TLS settings (NOMAD_CACERT, NOMAD_CLIENT_CERT, NOMAD_CLIENT_KEY)",
      options,
    );
  }
}

/** 403: the token is missing, unknown, or lacks a capability. */
export class NomadAclDeniedError extends NomadError {
  override name = "NomadAclDeniedError";
  constructor(init: { method: string; path: string; nomadMessage: string; capability?: string }) {
    super(
      { status: 403, ...init },
      `Nomad denied ${init.method} ${init.path}: ${init.nomadMessage || "Permission denied"}; ` +
        `check NOMAD_TOKEN is set and has ${init.capability ?? "the needed capability"} in NOMAD_NAMESPACE`,
    );
  }
}

/** 404: the job, allocation or evaluation does not exist (or was purged / garbage-collected). */
export class NomadNotFoundError extends NomadError {
  override name = "NomadNotFoundError";
  constructor(init: { method: string; path: string; nomadMessage: string }) {
    super(
      { status: 404, ...init },
      `Nomad ${init.method} ${init.path}: ${init.nomadMessage || "not found"}; check the ID and NOMAD_NAMESPACE / NOMAD_REGION`,
    );
  }
}

/**
 * 400 "job scaling blocked due to active deployment": the job's latest deployment is still
 * running. Jobs built by `sandboxJob` set `Update.MaxParallel = 0` so no deployment is created.
 */
export class NomadScaleBlockedError extends NomadError {
  override name = "NomadScaleBlockedError";
  constructor(init: { method: string; path: string; nomadMessage: string }) {
    super(
      { status: 400, ...init },
      `Nomad refused to scale (${init.method} ${init.path}): ${init.nomadMessage}; ` +
        'wait for the deployment to finish, or register the job with "Update": {"MaxParallel": 0} so scaling starts no deployment',
    );
  }
}

/** The call (including its retries) ran past its deadline. */
export class NomadTimeoutError extends NomadError {
  override name = "NomadTimeoutError";
  readonly timeoutMs: number;
  constructor(init: { method: string; path: string; timeoutMs: number; address: string }, options?: { cause?: unknown }) {
    super(
      { status: 0, method: init.method, path: init.path, nomadMessage: "" },
      `Nomad ${init.method} ${init.path} at ${init.address} did not answer within ${init.timeoutMs} ms; ` +
        "check NOMAD_ADDR points at a healthy agent, or raise the client's timeoutMs",
      options,
    );
    this.timeoutMs = init.timeoutMs;
  }
}

/** A 2xx answer whose body is not the shape Nomad documents (wrong address, proxy page, version skew). */
export class NomadResponseError extends NomadError {
  override name = "NomadResponseError";
  constructor(init: { status: number; method: string; path: string; problem: string }) {
    super(
      { status: init.status, method: init.method, path: init.path, nomadMessage: "" },
      `Nomad ${init.method} ${init.path} answered ${init.status} with an unexpected body: ${init.problem}; ` +
        "check NOMAD_ADDR points at a Nomad agent's HTTP API",
    );
  }
}

/** Bad options given to the client itself (e.g. an unreadable NOMAD_CACERT file). */
export class NomadConfigError extends SlotpoolError {
  override name = "NomadConfigError";
}
