/**
 * `slotpool job render`: prints the sandbox job, as the Nomad API JSON body
 * (`{"Job": ...}`, for `nomad job run -json` or `curl -X POST $NOMAD_ADDR/v1/jobs`) or as
 * HCL (for `nomad job run`), from the same options the pool uses.
 */
import {
  sandboxJobFromSettings,
  resolveSandboxJobOptions,
  SANDBOX_DRIVERS,
  type SandboxDriver,
  type SandboxJobOptions,
  SandboxJobOptionError,
  JOB_DEFAULTS,
  DEFAULT_JOB_ID,
  DEFAULT_IMAGE,
  DEFAULT_SLOT_MEMORY_MB,
  BROWSER_SLOT_MEMORY_MB,
  BROWSER_DRIVER_MB,
  MIN_SLOT_MEMORY_MB,
  SERVER_RESERVE_MB,
} from "../nomad/job.js";
import { sandboxJobHclFromSettings } from "../nomad/job-hcl.js";
import { CliUsageError, intFlag, parseFlags, stringFlag } from "./usage.js";

const HELP = `usage: slotpool job render --format json|hcl [options]

Prints the sandbox job (task group "sandbox", dynamic port "http").

options:
  --format json|hcl        json: the Nomad API body {"Job": ...}; hcl: a job file (default json)
  --job-id ID              job ID (default ${DEFAULT_JOB_ID})
  --image IMG              docker image (default ${DEFAULT_IMAGE}), or for raw_exec the .sif path;
                           raw_exec without --image runs this host's own slotpool (local development)
  --count N                sandbox servers (default ${JOB_DEFAULTS.count})
  --slots N                slots per server (default ${JOB_DEFAULTS.slots})
  --cpu MHZ                CPU per server (default ${JOB_DEFAULTS.cpu})
  --memory MB              memory per server (default ${SERVER_RESERVE_MB} + slots x ${DEFAULT_SLOT_MEMORY_MB}). The server keeps
                           ${SERVER_RESERVE_MB} MB; each slot gets an equal share of the rest as its memory bound and half
                           that share as its disk (min ${MIN_SLOT_MEMORY_MB} MB a slot, else rendering refuses)
  --browser                the slots run a browser each (an env with the browser tools): the default
                           memory is ${SERVER_RESERVE_MB} + ${BROWSER_DRIVER_MB} (its browser driver) + slots x (${DEFAULT_SLOT_MEMORY_MB} + ${BROWSER_SLOT_MEMORY_MB}) MB
  --driver D               docker | raw_exec (a .sif, or this host's slotpool) | exec (default docker)
  --command CMD            docker: the entrypoint (default slotpool); raw_exec with a .sif: apptainer
                           (default) or singularity; raw_exec without an image: the program running
                           slotpool (default: this node with this checkout's dist/src/cli/main.js);
                           exec: the slotpool binary (default /usr/local/bin/slotpool)
  --datacenter DC          a datacenter; repeat for several (default "dc1", every agent's default)
  --namespace NS           Nomad namespace (default: NOMAD_NAMESPACE, else Nomad's "default")
  --node-pool POOL         Nomad node pool
  --token T                sandbox token passed to the task as SANDBOX_TOKEN (default: env SANDBOX_TOKEN,
                           else a fresh random one: it is in the job's env block, stderr says so)
  --privileged             docker: run the container privileged
  --no-tun-device          docker: do not pass the host's /dev/net/tun (nodes without the tun module;
                           slots then get no network on, only loopback)
`;

export async function run(argv: string[]): Promise<number> {
  const [sub, ...rest] = argv;
  if (sub === undefined) throw new CliUsageError(`missing subcommand\n\n${HELP}`);
  if (sub === "--help" || sub === "-h") {
    process.stdout.write(HELP);
    return 0;
  }
  if (sub !== "render") throw new CliUsageError(`unknown job subcommand '${sub}'; expected 'render'\n\n${HELP}`);
  const flags = parseFlags(
    rest,
    {
      format: { type: "string" },
      "job-id": { type: "string" },
      image: { type: "string" },
      count: { type: "string" },
      slots: { type: "string" },
      cpu: { type: "string" },
      memory: { type: "string" },
      driver: { type: "string" },
      command: { type: "string" },
      datacenter: { type: "string", multiple: true },
      namespace: { type: "string" },
      "node-pool": { type: "string" },
      token: { type: "string" },
      privileged: { type: "boolean" },
      browser: { type: "boolean" },
      "no-tun-device": { type: "boolean" },
    },
    HELP,
  );
  if (!flags) return 0;
  const format = stringFlag(flags, "format") ?? "json";
  if (format !== "json" && format !== "hcl") throw new CliUsageError(`--format must be json or hcl, got '${format}'`);
  const driver = stringFlag(flags, "driver") ?? JOB_DEFAULTS.driver;
  if (!SANDBOX_DRIVERS.includes(driver as SandboxDriver)) {
    throw new CliUsageError(`--driver must be one of ${SANDBOX_DRIVERS.join(", ")}, got '${driver}'`);
  }
  const datacenters = flags.values["datacenter"];
  const options: SandboxJobOptions = {
    driver: driver as SandboxDriver,
    count: intFlag("count", stringFlag(flags, "count"), JOB_DEFAULTS.count, 0, 10_000),
    slots: intFlag("slots", stringFlag(flags, "slots"), JOB_DEFAULTS.slots, 1, 4096),
    cpu: intFlag("cpu", stringFlag(flags, "cpu"), JOB_DEFAULTS.cpu, 1),
  };
  const memory = stringFlag(flags, "memory");
  if (memory !== undefined) options.memoryMb = intFlag("memory", memory, 0, 16);
  const set = <K extends keyof SandboxJobOptions>(key: K, v: SandboxJobOptions[K] | undefined) => {
    if (v !== undefined) options[key] = v;
  };
  set("jobId", stringFlag(flags, "job-id"));
  set("image", stringFlag(flags, "image"));
  set("command", stringFlag(flags, "command"));
  set("namespace", stringFlag(flags, "namespace") ?? (process.env["NOMAD_NAMESPACE"] || undefined));
  set("nodePool", stringFlag(flags, "node-pool"));
  set("token", stringFlag(flags, "token") ?? (process.env["SANDBOX_TOKEN"] || undefined));
  if (flags.values["privileged"] === true) options.privileged = true;
  if (flags.values["browser"] === true) options.browser = true;
  if (flags.values["no-tun-device"] === true) options.tunDevice = false;
  if (Array.isArray(datacenters) && datacenters.length) options.datacenters = datacenters.map(String);

  let settings;
  try {
    settings = resolveSandboxJobOptions(options);
  } catch (err) {
    if (err instanceof SandboxJobOptionError) throw new CliUsageError(err.message);
    throw err;
  }
  if (settings.tokenGenerated) {
    // Never a server beyond loopback without a token: one was made; say where it is, not what.
    process.stderr.write(
      "slotpool job render: no --token (or SANDBOX_TOKEN) given, so a random sandbox token was generated: it is the task's env SANDBOX_TOKEN in the rendered job " +
        "(read it back with 'nomad job inspect'); clients need it as their bearer token\n",
    );
  }
  if (format === "json") process.stdout.write(JSON.stringify({ Job: sandboxJobFromSettings(settings) }, null, 2) + "\n");
  else process.stdout.write(sandboxJobHclFromSettings(settings));
  return 0;
}
