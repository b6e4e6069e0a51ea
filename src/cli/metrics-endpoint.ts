import { createServer, type Server } from "node:http";
import { closeGracefully, listenOn } from "../http/lifecycle.js";
import { PROMETHEUS_CONTENT_TYPE, type MetricsRegistry } from "../observability/metrics.js";

/**
 * `GET /metrics` of a run (`--metrics-port`): the run's own figures — infra failures by
 * cause, groups by outcome, scores — for Prometheus while it runs. Loopback only and
 * without a token: it says nothing secret and is not reachable from elsewhere.
 */
export async function serveRunMetrics(registry: MetricsRegistry, port: number): Promise<{ url: string; close(): Promise<void> }> {
  const server: Server = createServer((req, res) => {
    if (req.method === "GET" && (req.url === "/metrics" || req.url?.startsWith("/metrics?"))) {
      res.writeHead(200, { "content-type": PROMETHEUS_CONTENT_TYPE }).end(registry.render());
      return;
    }
    res.writeHead(404, { "content-type": "text/plain" }).end("only GET /metrics here\n");
  });
  const base = await listenOn(server, port, "127.0.0.1");
  return { url: `${base}/metrics`, close: () => closeGracefully(server, 500) };
}
