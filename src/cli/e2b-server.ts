import { readFileSync } from "node:fs";
import { IMAGE_FLAGS_HELP, POOL_FLAGS, backendConfigFromFlags, backendFlagOptions } from "./backend-flags.js";
import { serveUntilStopped } from "./stop-signal.js";
import { z } from "zod";
import { E2bServer } from "../e2b/server.js";
import { ToolBackendConfigSchema } from "../executor/backend-config.js";
import { createToolBackend } from "../executor/tool-backend.js";
import { createLogger } from "../observability/logger.js";
import { MetricsRegistry } from "../observability/metrics.js";
import type { TemplateSpec } from "../pool/types.js";
import { CliUsageError, boolFlag, intFlag, parseFlags, stringFlag } from "./usage.js";
import { imageReferenceProblem } from "../protocol/images.js";


const D = ToolBackendConfigSchema.parse({}).pool;

const HELP = `usage: slotpool e2b-server --api-key KEY [options]

Serves an E2B-compatible API over a slot pool: code written for E2B (the e2b SDK) runs on
slotpool's slots when pointed here with E2B_API_URL=E2B_SANDBOX_URL=http://HOST:PORT and
E2B_API_KEY=KEY. One E2B sandbox holds one slot; its timeout or kill releases (resets) it.
See docs/e2b.md for what is supported.

options:
  --host H                   address to listen on (default 127.0.0.1)
  --port P                   port (default 3000; 0 picks a free port)
  --api-key KEY              the key clients send as X-API-Key (or env E2B_API_KEY); required
  --templates FILE           JSON list of workspace templates ({name, setup, files?, timeoutS?});
                             Sandbox.create(NAME) gets a slot reset into template NAME
  --max-upload-mb N          largest file upload through /files (default 100)
  --max-download-mb N        largest file download through /files, streamed (default 1024)
  --file-timeout-s S         deadline of one /files download or upload (default 300)
  --upload-budget-mb N       bytes all uploads in flight may hold at once; past it 429
                             (default 256, at least the per-sandbox budget)
  --sandbox-upload-budget-mb N  the same for one sandbox's uploads (default 128, at least
                             --max-upload-mb)
  --max-streams-per-sandbox N   open streams (commands streamed or attached, watches, file
                             transfers) one sandbox may hold; past it 429 (default 32)
  --max-watchers-per-sandbox N  CreateWatcher watchers one sandbox may hold (default 8)
  --max-timeout-s S          longest sandbox timeout a client may ask for (default 86400)
  --domain D                 the domain sandboxes are handed: the SDKs' getHost(port) is then
                             <port>-<sandboxId>.D, which must reach this server (wildcard DNS; a
                             port may be part of D). Default e2b.localhost:<port> (docs/e2b.md, "Ports")
  --secrets-file FILE        keep E2B secrets (Secret.create) in FILE (mode 0600) so they outlive the
                             server; default: in memory only
  --tls-cert FILE --tls-key FILE  also serve HTTPS (same routes) with this certificate for
                             *.<domain> (PEM): E2B code reaches ports as https://getHost(port)
  --tls-port P               the HTTPS port (default: a free one; the listening line has it); the
                             default domain is then e2b.localhost:<tls port>
  --port-idle-timeout-s S    a connection to a sandbox's port with no byte either way for S seconds
                             is closed (default 620, as E2B's proxy)
  --max-port-connections-per-sandbox N  connections to its ports one sandbox may have open (HTTP
                             requests in flight, WebSockets); past it 429 (default 64)
  --max-port-transfer-mb N   bytes one such connection may carry each way (default 1024)
  --allow-network            sandboxes' commands may reach the internet (their slot's own network
                             namespace, as executor-server's); default: loopback only
  --template-registry R      HOST[:PORT][/PREFIX]: templates built through E2B's template API are pushed
                             there, so every container can fetch them (any host); default: the
                             building container's build layout, readable by containers on its host
  --template-base-image REF  the image fromTemplate('base') builds on (default e2bdev/base)
  --provisioner local|nomad  where sandbox containers run (default ${D.provisioner})
  --slots-per-container N    slots per container (default ${D.slotsPerContainer})
  --min-containers N         containers kept running (default ${D.minContainers})
  --max-containers N         most containers (default ${D.maxContainers})
  --idle-timeout-ms MS       how long a surplus of containers lasts before they are drained (default ${D.idleTimeoutMs})
  --acquire-timeout-ms MS    how long Sandbox.create waits for a free slot (default ${D.acquireTimeoutMs})
  --data-dir D               local provisioner: where workspaces live (default: a temp dir)
  --image IMG                nomad provisioner: sandbox image (default: the job builder's)
  --job-id ID                nomad provisioner: sandbox job id
  --driver D                 nomad provisioner: docker|raw_exec|exec
  --datacenters DC[,DC...]   nomad provisioner: datacenters of the job (default dc1, every agent's default)
  --namespace NS             nomad provisioner: the job's namespace (default NOMAD_NAMESPACE, else "default")
  --node-pool P              nomad provisioner: the job's node pool (Nomad >= 1.6)
  --cpu MHZ                  nomad provisioner: CPU per container (default 1000)
  --memory-mb MB             nomad provisioner: memory per container (default 128 + 224 x slots)
${IMAGE_FLAGS_HELP}

Nomad settings come from NOMAD_ADDR, NOMAD_TOKEN, NOMAD_NAMESPACE, NOMAD_REGION, NOMAD_CACERT, ...
`;

const TemplatesFileSchema = z.array(
  z
    .object({
      name: z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/, "template names are letters, digits, '.', '_' and '-'"),
      setup: z.array(z.string()),
      files: z.record(z.string(), z.string()).optional(),
      timeoutS: z.number().int().positive().optional(),
    })
    .strict(),
);

/** Workspace templates from --templates FILE; a bad file gets an error naming the entry. */
export function loadTemplates(file: string): Map<string, TemplateSpec> {
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(file, "utf8"));
  } catch (err) {
    throw new CliUsageError(`--templates ${file}: ${err instanceof Error ? err.message : String(err)}`);
  }
  const parsed = TemplatesFileSchema.safeParse(raw);
  if (!parsed.success) {
    const i = parsed.error.issues[0]!;
    throw new CliUsageError(`--templates ${file}: ${i.path.join(".") || "(file)"}: ${i.message}`);
  }
  const out = new Map<string, TemplateSpec>();
  for (const t of parsed.data) {
    if (t.name === "base") throw new CliUsageError(`--templates ${file}: 'base' is the plain slot and cannot be redefined`);
    if (out.has(t.name)) throw new CliUsageError(`--templates ${file}: template '${t.name}' is defined twice`);
    out.set(t.name, { name: t.name, setup: t.setup, ...(t.files ? { files: t.files } : {}), ...(t.timeoutS ? { timeoutS: t.timeoutS } : {}) });
  }
  return out;
}


/** --template-registry HOST[:PORT][/PREFIX] (where built templates are pushed) and --template-base-image REF. */
function templateBuildOptions(flags: NonNullable<ReturnType<typeof parseFlags>>): { templateRegistry?: string; templateBaseImage?: string } {
  const registry = stringFlag(flags, "template-registry");
  const base = stringFlag(flags, "template-base-image");
  if (registry !== undefined) {
    const problem = imageReferenceProblem(`${registry}/probe:tag`);
    if (problem || !registry.includes(".") && !registry.includes(":") && !registry.startsWith("localhost")) throw new CliUsageError(`--template-registry ${registry}: not HOST[:PORT][/PREFIX] of a registry${problem ? ` (${problem})` : ""}`);
  }
  if (base !== undefined) {
    const problem = imageReferenceProblem(base);
    if (problem) throw new CliUsageError(`--template-base-image ${base}: ${problem}`);
  }
  return { ...(registry ? { templateRegistry: registry.replace(/\/+$/, "") } : {}), ...(base ? { templateBaseImage: base } : {}) };
}

/** --tls-cert/--tls-key (both or neither) and --tls-port, read once at start. */
function tlsOptions(certFile: string | undefined, keyFile: string | undefined, port: string | undefined): { cert: Buffer; key: Buffer; port: number } | undefined {
  if (!certFile && !keyFile) {
    if (port !== undefined) throw new CliUsageError("--tls-port needs --tls-cert and --tls-key");
    return undefined;
  }
  if (!certFile || !keyFile) throw new CliUsageError("--tls-cert and --tls-key go together (a certificate for *.<domain> and its key, PEM)");
  const read = (flag: string, file: string): Buffer => {
    try {
      return readFileSync(file);
    } catch (err) {
      throw new CliUsageError(`${flag} ${file}: ${err instanceof Error ? err.message : String(err)}`);
    }
  };
  return { cert: read("--tls-cert", certFile), key: read("--tls-key", keyFile), port: intFlag("tls-port", port, 0, 0, 65535) };
}

export async function run(argv: string[]): Promise<number> {
  const flags = parseFlags(
    argv,
    {
      host: { type: "string" },
      port: { type: "string" },
      "api-key": { type: "string" },
      templates: { type: "string" },
      "max-upload-mb": { type: "string" },
      "max-download-mb": { type: "string" },
      "file-timeout-s": { type: "string" },
      "upload-budget-mb": { type: "string" },
      "sandbox-upload-budget-mb": { type: "string" },
      "max-streams-per-sandbox": { type: "string" },
      "max-watchers-per-sandbox": { type: "string" },
      "max-timeout-s": { type: "string" },
      domain: { type: "string" },
      "tls-cert": { type: "string" },
      "secrets-file": { type: "string" },
      "tls-key": { type: "string" },
      "tls-port": { type: "string" },
      "port-idle-timeout-s": { type: "string" },
      "max-port-connections-per-sandbox": { type: "string" },
      "max-port-transfer-mb": { type: "string" },
      "allow-network": { type: "boolean" },
      "template-registry": { type: "string" },
      "template-base-image": { type: "string" },
      ...backendFlagOptions(POOL_FLAGS),
    },
    HELP,
  );
  if (!flags) return 0;
  const host = stringFlag(flags, "host") ?? "127.0.0.1";
  const port = intFlag("port", stringFlag(flags, "port"), 3000, 0, 65535);
  const apiKey = stringFlag(flags, "api-key") ?? (process.env["E2B_API_KEY"] || undefined);
  if (!apiKey) throw new CliUsageError("--api-key KEY (or E2B_API_KEY) is required: E2B clients authenticate with it");
  const templatesFile = stringFlag(flags, "templates");
  const templates = templatesFile ? loadTemplates(templatesFile) : new Map<string, TemplateSpec>();
  const maxUploadBytes = intFlag("max-upload-mb", stringFlag(flags, "max-upload-mb"), 100, 1, 1_000_000) * 1024 * 1024;
  const maxTimeoutS = intFlag("max-timeout-s", stringFlag(flags, "max-timeout-s"), 86_400, 1, 30 * 86_400);
  const MiB = 1024 * 1024;
  const bounds = {
    maxDownloadBytes: intFlag("max-download-mb", stringFlag(flags, "max-download-mb"), 1024, 1, 1_000_000) * MiB,
    fileTimeoutMs: intFlag("file-timeout-s", stringFlag(flags, "file-timeout-s"), 300, 1, 86_400) * 1000,
    // Unset: the server's defaults, which grow with --max-upload-mb.
    ...(stringFlag(flags, "upload-budget-mb") !== undefined ? { uploadBudgetBytes: intFlag("upload-budget-mb", stringFlag(flags, "upload-budget-mb"), 256, 1, 1_000_000) * MiB } : {}),
    ...(stringFlag(flags, "sandbox-upload-budget-mb") !== undefined
      ? { sandboxUploadBudgetBytes: intFlag("sandbox-upload-budget-mb", stringFlag(flags, "sandbox-upload-budget-mb"), 128, 1, 1_000_000) * MiB }
      : {}),
    maxStreamsPerSandbox: intFlag("max-streams-per-sandbox", stringFlag(flags, "max-streams-per-sandbox"), 32, 1, 10_000),
    maxWatchersPerSandbox: intFlag("max-watchers-per-sandbox", stringFlag(flags, "max-watchers-per-sandbox"), 8, 1, 10_000),
    portLimits: {
      idleTimeoutMs: intFlag("port-idle-timeout-s", stringFlag(flags, "port-idle-timeout-s"), 620, 1, 86_400) * 1000,
      maxConnections: intFlag("max-port-connections-per-sandbox", stringFlag(flags, "max-port-connections-per-sandbox"), 64, 1, 10_000),
      maxTransferBytes: intFlag("max-port-transfer-mb", stringFlag(flags, "max-port-transfer-mb"), 1024, 1, 1_000_000) * MiB,
    },
  };
  const tls = tlsOptions(stringFlag(flags, "tls-cert"), stringFlag(flags, "tls-key"), stringFlag(flags, "tls-port"));
  const domain = stringFlag(flags, "domain");
  if (domain !== undefined && !/^[A-Za-z0-9.-]+(:\d{1,5})?$/.test(domain)) throw new CliUsageError(`--domain ${domain}: a host name, optionally with :port (sandboxes' hosts are <port>-<sandboxId>.${domain})`);
  const config = backendConfigFromFlags(flags, POOL_FLAGS);

  const logger = createLogger({ name: "e2b-server" });
  let backend: Awaited<ReturnType<typeof createToolBackend>>;
  try {
    backend = await createToolBackend(config, { logger, metrics: new MetricsRegistry() });
  } finally {
    logger.flush();
  }
  const server = new E2bServer({ pool: backend.pool, apiKey, templates, logger, maxUploadBytes, maxTimeoutS, allowNetwork: boolFlag(flags, "allow-network"), ...(domain ? { domain } : {}), ...(tls ? { tls } : {}), ...(stringFlag(flags, "secrets-file") ? { secretsFile: stringFlag(flags, "secrets-file")! } : {}), ...templateBuildOptions(flags), ...bounds });
  let stopping: Promise<void> | undefined;
  // Killing the server ends every sandbox: each slot is released (reset), then the pool stops.
  const shutdown = () => (stopping ??= server.close().then(() => backend.close()));
  return serveUntilStopped({
    logger,
    listen: () => server.listen(port, host),
    listening: (url) => ({ url, ...(server.tlsUrl ? { tls_url: server.tlsUrl } : {}), domain: server.domain, provisioner: config.pool.provisioner, slotsPerContainer: config.pool.slotsPerContainer, templates: [...templates.keys()] }),
    stopping: "ending every sandbox",
    shutdown,
  });
}
