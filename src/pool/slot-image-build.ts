import { createReadStream } from "node:fs";
import { stat } from "node:fs/promises";
import { request } from "node:http";
import { request as httpsRequest } from "node:https";
import { ImageBuildEventSchema, type ImageBuildEvent, type ImageBuildRequest } from "../protocol/image-build.js";
import { PoolError } from "./errors.js";
import type { LeasedSlot } from "./types.js";

/**
 * The pool's client of image builds (`POST /images/build`, protocol/image-build.ts): a build
 * in a leased slot of its sandbox server, its events as they come, and the build contexts
 * (COPY's files) uploaded to that server first. The E2B server's template builds go through it.
 */

export class SlotImageBuildError extends PoolError {
  override name = "SlotImageBuildError";
}

function call(slot: LeasedSlot, method: string, path: string, headers: Record<string, string | number>, signal?: AbortSignal) {
  const c = slot.container;
  const url = new URL(path, c.url);
  const fn = url.protocol === "https:" ? httpsRequest : request;
  return fn(url, { method, headers: { ...headers, ...(c.token ? { authorization: `Bearer ${c.token}` } : {}) }, ...(signal ? { signal } : {}) });
}

/** Whether the slot's server has the build context `hash`. */
export function hasBuildContext(slot: LeasedSlot, hash: string): Promise<boolean> {
  return new Promise((resolve, reject) => {
    const req = call(slot, "GET", `/images/contexts?hash=${hash}`, {});
    req.once("error", reject);
    req.once("response", (res) => {
      let text = "";
      res.setEncoding("utf8");
      res.on("data", (d: string) => (text += d));
      res.once("end", () => {
        if (res.statusCode !== 200) return reject(new SlotImageBuildError(`the sandbox server answered ${res.statusCode} for build context ${hash}: ${text.slice(0, 300)}`));
        resolve((JSON.parse(text) as { present?: boolean }).present === true);
      });
    });
    req.end();
  });
}

/** Uploads the file at `path` (a gzipped tar) as build context `hash` to the slot's server. */
export async function putBuildContext(slot: LeasedSlot, hash: string, path: string): Promise<void> {
  const size = (await stat(path)).size;
  await new Promise<void>((resolve, reject) => {
    const req = call(slot, "PUT", `/images/contexts?hash=${hash}`, { "content-type": "application/gzip", "content-length": size });
    req.once("error", reject);
    req.once("response", (res) => {
      let text = "";
      res.setEncoding("utf8");
      res.on("data", (d: string) => (text += d));
      res.once("end", () => (res.statusCode === 200 ? resolve() : reject(new SlotImageBuildError(`uploading build context ${hash}: HTTP ${res.statusCode}: ${text.slice(0, 300)}`))));
    });
    createReadStream(path).once("error", reject).pipe(req);
  });
}

/** Runs a build in `slot`; `onEvent` gets every event; resolves with the last (`done` or `error`). */
export function buildInSlot(slot: LeasedSlot, req: Omit<ImageBuildRequest, "slot_id">, onEvent: (ev: ImageBuildEvent) => void, signal?: AbortSignal): Promise<ImageBuildEvent> {
  const body = JSON.stringify({ ...req, slot_id: slot.slotId });
  return new Promise((resolve, reject) => {
    const r = call(slot, "POST", "/images/build", { "content-type": "application/json", "content-length": Buffer.byteLength(body) }, signal);
    // A build is long: the lease is kept as used while it runs.
    const keep = setInterval(() => slot.touch(), 30_000);
    const finish = (fn: () => void): void => {
      clearInterval(keep);
      fn();
    };
    r.once("error", (err) => finish(() => reject(err)));
    r.once("response", (res) => {
      res.setEncoding("utf8");
      if (res.statusCode !== 200) {
        let text = "";
        res.on("data", (d: string) => (text += d));
        res.once("end", () => finish(() => reject(new SlotImageBuildError(`the sandbox server refused the build: HTTP ${res.statusCode}: ${text.slice(0, 500)}`))));
        return;
      }
      let buf = "";
      let last: ImageBuildEvent | undefined;
      res.on("data", (d: string) => {
        buf += d;
        let nl: number;
        while ((nl = buf.indexOf("\n")) >= 0) {
          const line = buf.slice(0, nl);
          buf = buf.slice(nl + 1);
          if (!line) continue;
          const parsed = ImageBuildEventSchema.safeParse(JSON.parse(line));
          if (!parsed.success) continue;
          last = parsed.data;
          onEvent(parsed.data);
        }
      });
      res.once("end", () => finish(() => (last && (last.type === "done" || last.type === "error") ? resolve(last) : reject(new SlotImageBuildError("the sandbox server's build stream ended without a result (the container may have gone)")))));
      res.once("error", (err) => finish(() => reject(err)));
    });
    r.end(body);
  });
}
