import { createServer, type IncomingMessage, type Server } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BearerAuth } from "../../src/http/auth.js";
import { JsonBodyReader, parseBody } from "../../src/http/body.js";
import { HttpError } from "../../src/http/errors.js";
import { closeGracefully, listenOn } from "../../src/http/lifecycle.js";
import { sendError, sendJson } from "../../src/http/respond.js";
import { RouteTable } from "../../src/http/routes.js";
import { z } from "zod";

/** A tiny service built only from the http room, as the three servers build theirs. */
function service(token: string | undefined): Server {
  const auth = new BearerAuth(token);
  const body = new JsonBodyReader({ maxBytes: 64, budgetBytes: 64 });
  const routes = new RouteTable()
    .add("GET", "/health", (_req, res) => sendJson(res, 200, { status: "ok" }), { public: true })
    .add("POST", "/echo", async (req, res) => sendJson(res, 200, parseBody(z.object({ name: z.string() }), await body.read(req))));
  return createServer((req, res) => {
    Promise.resolve()
      .then(async () => {
        const { route, path } = routes.match(req);
        if (!route.public) auth.check(req);
        await route.handler(req, res, path);
      })
      .catch((err: unknown) => sendError(res, err));
  });
}

describe("the shared HTTP room", () => {
  let server: Server;
  let url: string;
  beforeAll(async () => {
    server = service("s3cret");
    url = await listenOn(server, 0, "127.0.0.1");
  });
  afterAll(() => closeGracefully(server, 1000));

  const call = async (method: string, path: string, init: { body?: string; token?: string | null } = {}) => {
    const token = init.token === undefined ? "s3cret" : init.token;
    const r = await fetch(url + path, { method, ...(init.body !== undefined ? { body: init.body } : {}), headers: token ? { authorization: `Bearer ${token}` } : {} });
    return { status: r.status, body: (await r.json()) as Record<string, unknown> };
  };

  it("answers 404 for a path the table lacks and 405 for another method on a known path", async () => {
    expect(await call("GET", "/nowhere")).toMatchObject({ status: 404, body: { error: "no route GET /nowhere" } });
    expect(await call("GET", "/echo")).toMatchObject({ status: 405, body: { error: "method GET not allowed on /echo" } });
    expect(await call("GET", "//x?y")).toMatchObject({ status: 404 });
  });

  it("guards all but public routes: no header 401, malformed 401, wrong token 403", async () => {
    expect((await call("GET", "/health", { token: null })).status).toBe(200);
    expect((await call("POST", "/echo", { body: '{"name":"a"}', token: null })).status).toBe(401);
    expect((await call("POST", "/echo", { body: '{"name":"a"}', token: "s3cre" })).status).toBe(403);
    const malformed = await fetch(url + "/echo", { method: "POST", body: "{}", headers: { authorization: "Basic eA==" } });
    expect(malformed.status).toBe(401);
  });

  it("parses JSON bodies within the limit, and names the problem otherwise", async () => {
    expect(await call("POST", "/echo", { body: '{"name":"a"}' })).toEqual({ status: 200, body: { name: "a" } });
    expect(await call("POST", "/echo", { body: "" })).toMatchObject({ status: 400, body: { field: "body", error: expect.stringMatching(/got nothing/) } });
    expect(await call("POST", "/echo", { body: "{nope" })).toMatchObject({ status: 400, body: { field: "body", error: expect.stringMatching(/not valid JSON/) } });
    expect(await call("POST", "/echo", { body: '{"name":3}' })).toMatchObject({ status: 400, body: { field: "name" } });
    expect(await call("POST", "/echo", { body: JSON.stringify({ name: "x".repeat(100) }) })).toMatchObject({ status: 413, body: { error: expect.stringMatching(/larger than 64 bytes/) } });
  });

  it("refuses a route defined twice", () => {
    const t = new RouteTable().add("GET", "/a", () => undefined);
    expect(() => t.add("GET", "/a", () => undefined)).toThrow(/defined twice/);
    expect(t.add("POST", "/a", () => undefined).list()).toEqual(["GET /a", "POST /a"]);
  });

  it("lets every request through when no token is set", () => {
    expect(new BearerAuth(undefined).enabled).toBe(false);
    expect(() => new BearerAuth(undefined).check({ headers: {} } as IncomingMessage)).not.toThrow();
    expect(() => new BearerAuth("t").check({ headers: {} } as IncomingMessage)).toThrow(HttpError);
  });
});
