import type { IncomingMessage, ServerResponse } from "node:http";
import type { JsonBodyReader } from "../../http/body.js";
import { parseBody } from "../../http/body.js";
import { HttpError } from "../../http/errors.js";
import { sendJson } from "../../http/respond.js";
import type { RouteTable } from "../../http/routes.js";
import { requestTarget } from "../../http/target.js";
import { ImageBuildRequestSchema, type ImageBuildEvent } from "../../protocol/image-build.js";
import type { Slot } from "../core/slot.js";
import { BuildFailure, type ImageBuilds } from "../service/image-build.js";

/** What the routes need from the sandbox service. */
export interface ImageBuildRouteHost {
  readonly imageBuilds: ImageBuilds;
  slotById(id: string): Slot;
}

/**
 * `POST /images/build` (NDJSON events until `done` or `error`), and the build contexts COPY
 * steps use: `PUT /images/contexts?hash=<hex>` (a gzipped tar), `GET /images/contexts?hash=<hex>`
 * (`{present}`). Wire format: protocol/image-build.ts. A client that goes away cancels the build.
 */
export function addImageBuildRoutes(table: RouteTable, host: ImageBuildRouteHost, body: JsonBodyReader): RouteTable {
  const hashOf = (req: IncomingMessage): string => {
    const hash = requestTarget(req.url).query.get("hash") ?? "";
    if (!/^[a-f0-9]{64}$/.test(hash)) throw new HttpError(400, "hash must be a lower-case hex sha256", "hash");
    return hash;
  };
  return table
    .add("GET", "/images/contexts", async (req, res) => sendJson(res, 200, { present: host.imageBuilds.contexts.has(hashOf(req)) }))
    .add("PUT", "/images/contexts", async (req, res) => {
      await host.imageBuilds.contexts.put(hashOf(req), req);
      sendJson(res, 200, { present: true });
    })
    .add("POST", "/images/build", async (req, res) => {
      const r = parseBody(ImageBuildRequestSchema, await body.read(req));
      const slot = host.slotById(r.slot_id);
      await streamBuild(res, (emit, signal) => host.imageBuilds.build(slot, r, emit, signal));
    });
}

async function streamBuild(res: ServerResponse, run: (emit: (ev: ImageBuildEvent) => void, signal: AbortSignal) => Promise<void>): Promise<void> {
  const abort = new AbortController();
  res.once("close", () => {
    if (!res.writableFinished) abort.abort();
  });
  res.writeHead(200, { "content-type": "application/x-ndjson", "cache-control": "no-cache" });
  res.flushHeaders();
  const emit = (ev: ImageBuildEvent): void => {
    if (!res.destroyed) res.write(JSON.stringify(ev) + "\n");
  };
  try {
    await run(emit, abort.signal);
  } catch (err) {
    emit({ type: "error", message: err instanceof Error ? err.message : String(err), ...(err instanceof BuildFailure ? { step: err.step, code: err.code } : { code: "BUILD_FAILED" }) });
  }
  res.end();
}
