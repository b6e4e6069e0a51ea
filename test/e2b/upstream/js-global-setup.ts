// Points E2B's own JS SDK tests at a `slotpool e2b-server` with its defaults (plus a mirror of
// the template tests' Docker Hub images): the only adaptation they get (see ORIGIN.md). The
// SDK reads E2B_API_URL / E2B_SANDBOX_URL / E2B_API_KEY; the test workers are started after
// this runs and inherit them.
import { startE2bServerProcess, type E2bServerProcess } from "./server-process.js";
import { startTemplateImages, type TemplateImages } from "./template-images.js";

let server: E2bServerProcess | undefined;
let images: TemplateImages | undefined;

export async function setup(): Promise<void> {
  // The template tests' base images (Docker Hub's, which CI cannot reach) from a registry on loopback.
  images = await startTemplateImages();
  // In the fake internet (fake-internet.ts, as root), sandboxes get the network, as E2B's do by default.
  const internet = process.env["SLOTPOOL_UPSTREAM_INTERNET"] === "1" ? ["--allow-network"] : [];
  server = await startE2bServerProcess([...(images?.args ?? []), ...internet]);
  process.env["E2B_API_URL"] = server.url;
  process.env["E2B_SANDBOX_URL"] = server.url;
  process.env["E2B_API_KEY"] = server.apiKey;
  process.env["E2B_DOMAIN"] = new URL(server.url).host;
  // https://getHost(port): the server's certificate (a throwaway CA's) is trusted by the workers.
  if (server.tls) process.env["NODE_EXTRA_CA_CERTS"] = server.tls.caFile;
}

export async function teardown(): Promise<void> {
  await server?.stop();
  await images?.stop();
}
