// E2B's own Python SDK tests with everything they reach started beside them, in one process
// tree (so that, as root, the whole tree runs in the fake internet's namespaces:
// fake-internet.ts): the template tests' image registry, `slotpool e2b-server`, and pytest
// pointed at it. `node --import tsx python-suite.ts PYTHON JUNIT_FILE [--internet]`; pytest's
// output on stdout, its JUnit report in JUNIT_FILE (run-upstream.ts reads it). `--internet`:
// the server's sandboxes get the network (`--allow-network`), as E2B's do by default. Ends,
// stopping the server and registry, when its stdin closes (the test that started it is gone).
import { spawn } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { startE2bServerProcess } from "./server-process.js";
import { startTemplateImages } from "./template-images.js";

const [python, report, ...flags] = process.argv.slice(2);
if (!python || !report) throw new Error("usage: python-suite.ts PYTHON JUNIT_FILE [--internet]");
const root = join(dirname(fileURLToPath(import.meta.url)), "python");

// The template tests' base images (Docker Hub's, which CI cannot reach) from a registry on loopback.
const images = await startTemplateImages();
const server = await startE2bServerProcess([...(images?.args ?? []), ...(flags.includes("--internet") ? ["--allow-network"] : [])]);
let stopping: Promise<void> | undefined;
const stop = (): Promise<void> => (stopping ??= (async () => {
  await server.stop();
  await images?.stop();
})());
process.stdin.on("end", () => void stop().then(() => process.exit(1)));
process.stdin.resume();
try {
  const code = await new Promise<number | null>((resolve) => {
    // -p slotpool_localhost: `*.localhost` is loopback, as with systemd-resolved (https://get_host(port)).
    const child = spawn(python, ["-m", "pytest", "-p", "no:cacheprovider", "-p", "slotpool_localhost", "-q", "-n", "2", `--junitxml=${report}`, "-o", "junit_family=xunit1", root], {
      cwd: root,
      env: {
        ...process.env,
        E2B_API_URL: server.url,
        E2B_SANDBOX_URL: server.url,
        E2B_API_KEY: server.apiKey,
        E2B_DOMAIN: new URL(server.url).host,
        // The plugin lives beside the tests (pytest loads -p plugins before the ini's pythonpath).
        PYTHONPATH: [root, process.env["PYTHONPATH"]].filter(Boolean).join(":"),
        // httpx trusts the server's certificate (a throwaway CA's) for https://get_host(port).
        ...(server.tls ? { SSL_CERT_FILE: server.tls.caFile } : {}),
      },
      stdio: ["ignore", "inherit", "inherit"],
    });
    child.once("close", (c) => resolve(c));
  });
  process.stdout.write(`pytest exited ${code}\n`);
} finally {
  await stop();
}
process.exit(0);
