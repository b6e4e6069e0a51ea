import { randomBytes, randomUUID } from "node:crypto";
import type { Readable } from "node:stream";
import { Agent, request, type Dispatcher } from "undici";
import type { VolumeEntry, VolumeInfo } from "../protocol/volumes.js";
import type { ContainerInfo } from "../pool/types.js";
import { E2bApiError } from "./errors.js";

/** What the volume backend needs of the pool: its containers (SlotPool's `containerList`). */
export interface VolumePool {
  containerList?(): Array<ContainerInfo & { state: string }>;
}

/** Volume traffic to the sandbox servers: control calls and file streams, with deadlines. */
const agent: Dispatcher = new Agent({ keepAliveTimeout: 30_000, connections: 32, headersTimeout: 60_000, bodyTimeout: 300_000 });

/**
 * E2B's volumes, kept by the sandbox servers (`/volumes/*`, protocol/volumes.ts) in the
 * volumes directory every container of the pool shares: any ready container answers for all
 * of them. Volume ids are UUIDs (as E2B's), each volume's token a random secret the content
 * API is opened with.
 */
export class SandboxVolumes {
  constructor(private readonly pool: VolumePool) {}

  /** A ready container to ask (they all see the same volumes). */
  private container(): ContainerInfo {
    const ready = this.pool.containerList?.().filter((c) => c.state === "ready") ?? [];
    if (ready.length === 0) throw new E2bApiError(503, "no sandbox container is up to serve volumes; try again once the pool has started one");
    return ready[Math.floor(Math.random() * ready.length)]!;
  }

  private headers(c: ContainerInfo, extra: Record<string, string> = {}): Record<string, string> {
    return { ...extra, ...(c.token ? { authorization: `Bearer ${c.token}` } : {}) };
  }

  private async call<T>(path: string, body: Record<string, unknown>): Promise<T> {
    const c = this.container();
    const res = await request(c.url + path, { method: "POST", dispatcher: agent, headers: this.headers(c, { "content-type": "application/json" }), body: JSON.stringify(body) });
    return (await answer(res)) as T;
  }

  async create(name: string): Promise<VolumeInfo> {
    return this.call<VolumeInfo>("/volumes/create", { volume_id: randomUUID(), name, token: randomBytes(24).toString("base64url") });
  }

  async list(): Promise<VolumeInfo[]> {
    return (await this.call<{ volumes: VolumeInfo[] }>("/volumes/list", {})).volumes;
  }

  /** The volume, or E2B's 404. */
  async get(id: string): Promise<VolumeInfo> {
    return this.call<VolumeInfo>("/volumes/get", { volume_id: id });
  }

  async byName(name: string): Promise<VolumeInfo | undefined> {
    return (await this.list()).find((v) => v.name === name);
  }

  async delete(id: string): Promise<void> {
    await this.call("/volumes/delete", { volume_id: id });
  }

  stat(id: string, path: string): Promise<VolumeEntry> {
    return this.call("/volumes/stat", { volume_id: id, path });
  }

  async listDir(id: string, path: string, depth: number): Promise<VolumeEntry[]> {
    return (await this.call<{ entries: VolumeEntry[] }>("/volumes/list-dir", { volume_id: id, path, depth })).entries;
  }

  mkdir(id: string, path: string, force: boolean, mode: number | undefined): Promise<VolumeEntry> {
    return this.call("/volumes/mkdir", { volume_id: id, path, force, ...(mode !== undefined ? { mode } : {}) });
  }

  chmeta(id: string, path: string, mode: number | undefined): Promise<VolumeEntry> {
    return this.call("/volumes/chmeta", { volume_id: id, path, ...(mode !== undefined ? { mode } : {}) });
  }

  async remove(id: string, path: string): Promise<void> {
    await this.call("/volumes/remove", { volume_id: id, path });
  }

  /** The file's bytes as a stream (its length), or the server's refusal. */
  async read(id: string, path: string, signal?: AbortSignal): Promise<{ body: Readable; length: number | undefined }> {
    const c = this.container();
    const res = await request(`${c.url}/volumes/file?${new URLSearchParams({ volume_id: id, path })}`, { method: "GET", dispatcher: agent, headers: this.headers(c), ...(signal ? { signal } : {}) });
    if (res.statusCode !== 200) await answer(res);
    const len = Number(res.headers["content-length"]);
    return { body: res.body, length: Number.isFinite(len) ? len : undefined };
  }

  /** Streams `body` into the file (the sandbox server stages and bounds it). */
  async write(id: string, path: string, body: Readable, options: { force: boolean; mode?: number | undefined; length?: number | undefined }): Promise<VolumeEntry> {
    const c = this.container();
    const q = new URLSearchParams({ volume_id: id, path, force: String(options.force), ...(options.mode !== undefined ? { mode: String(options.mode) } : {}) });
    const res = await request(`${c.url}/volumes/file?${q}`, {
      method: "PUT",
      dispatcher: agent,
      headers: this.headers(c, { "content-type": "application/octet-stream", ...(options.length !== undefined ? { "content-length": String(options.length) } : {}) }),
      body,
    });
    return (await answer(res)) as VolumeEntry;
  }
}

/** A sandbox server's answer: its JSON, or its refusal as an E2bApiError with its status. */
async function answer(res: Dispatcher.ResponseData): Promise<unknown> {
  const text = await res.body.text();
  if (res.statusCode === 200) return JSON.parse(text) as unknown;
  let message = text;
  try {
    message = (JSON.parse(text) as { error?: string }).error ?? text;
  } catch {
    /* not JSON */
  }
  throw new E2bApiError(res.statusCode, message);
}
