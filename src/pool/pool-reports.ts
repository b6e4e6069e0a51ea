import type { HealthResponse } from "../protocol/sandbox.js";
import { ProvisionerError, type Provisioner } from "./provisioner.js";
import type { ContainerRecord } from "./records.js";

/** One container's /health as the pool asked for it, or why it did not answer. */
export interface ContainerHealth {
  id: string;
  url: string;
  health?: HealthResponse;
  error?: string;
}

/**
 * The pool's reports that read its containers but change nothing: each live container's
 * /health asked now (a run's isolation summary), and why start() timed out.
 */
export function askContainerHealth(live: readonly ContainerRecord[]): Promise<ContainerHealth[]> {
  return Promise.all(
    live.map(async (c) => {
      try {
        return { id: c.info.id, url: c.info.url, health: await c.client.health({ timeoutMs: 5_000 }) };
      } catch (err) {
        return { id: c.info.id, url: c.info.url, error: errorMessage(err) };
      }
    }),
  );
}

/** start() did not see `min` healthy containers within `timeoutMs`: what the provisioner says about them, and what to change. */
export async function startTimeoutError(provisioner: Provisioner, o: { ready: number; min: number; timeoutMs: number; lastProblem: ProvisionerError | undefined }): Promise<Error> {
  let detail = "";
  try {
    detail = (await provisioner.describe?.()) ?? "";
  } catch (err) {
    detail = `(could not describe the containers: ${errorMessage(err)})`;
  }
  const last = o.lastProblem ? ` Last problem: ${o.lastProblem.message}.` : "";
  // The description's placement line repeats what the last problem already said (with its advice).
  if (o.lastProblem) detail = detail.split("\n").filter((l) => !(l.trim().startsWith("placement: ") && o.lastProblem!.message.includes(l.trim().slice("placement: ".length)))).join("\n");
  return new ProvisionerError(
    `the ${provisioner.kind} provisioner brought up ${o.ready} of ${o.min} healthy containers within ${o.timeoutMs} ms.${last}` +
      (detail ? `\n${detail}` : "") +
      `\nCheck the containers' logs, lower minContainers, or raise startTimeoutMs.`,
    "start-timeout",
  );
}

function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
