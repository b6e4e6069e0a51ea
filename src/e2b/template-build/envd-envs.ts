import { IMAGE_TOOLS_MOUNT } from "../../protocol/images.js";
import type { ProcessStartRequest } from "../../protocol/process-session.js";
import type { ProcessStream } from "../slot-processes.js";

/**
 * envd's `GET /envs` inside a sandbox of a built template. Programs in an E2B sandbox may ask
 * envd, at `http://localhost:49983`, for the sandbox's environment variables: E2B's code
 * interpreter server does before its first execution (template/server/envs.py), and fails the
 * execution when nothing answers. In E2B envd listens in the VM; slotpool's envd is the E2B
 * server, outside the slot, so in a slot nothing would. A sandbox of a built template gets a
 * stand-in on 127.0.0.1:49983 of its own network namespace: the image tools' static busybox
 * `httpd`, serving one file, `envs`, the JSON object of the variables given at create (envd's
 * answer). No token is checked (envd checks `X-Access-Token`): the sandbox's own processes,
 * the only ones that reach it, see those variables in their environment anyway; from outside,
 * port 49983 is the E2B server's in-sandbox API, never this. Other envd paths answer 404.
 *
 * It runs as a helper (hidden from `commands.list`, as root), its variables written through
 * its stdin, never in its arguments.
 */

export const ENVD_PORT = 49983;
/** Where the stand-in's one file lives in the sandbox (not under the workspace or /tmp, which the sandbox's code lists). */
const ENVD_DIR = "/run/slotpool-envd";
const BUSYBOX = `${IMAGE_TOOLS_MOUNT}/bin/busybox`;

export interface EnvdHelpers {
  startHelper(req: Omit<ProcessStartRequest, "slot_id" | "tag">): Promise<ProcessStream>;
  input(pid: number, data: Uint8Array): Promise<void>;
  closeStdin(pid: number): Promise<void>;
}

/** Starts the stand-in; resolves once its file is written (the server then binds at once). */
export async function startEnvdEnvs(processes: EnvdHelpers, envs: Record<string, string>): Promise<void> {
  const script = `${BUSYBOX} mkdir -p "$1" && ${BUSYBOX} cat > "$1/envs" && exec ${BUSYBOX} httpd -f -p 127.0.0.1:${ENVD_PORT} -h "$1"`;
  const stream = await processes.startHelper({ cmd: BUSYBOX, args: ["sh", "-c", script, "sh", ENVD_DIR], stdin: true, user: "0" });
  await processes.input(stream.pid, Buffer.from(JSON.stringify(envs)));
  await processes.closeStdin(stream.pid);
  // The stream lives as long as the sandbox (its kill closes it); what it says is not needed.
  void (async () => {
    for await (const _ of stream.events);
  })().catch(() => undefined);
}
