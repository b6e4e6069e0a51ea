import type { IncomingMessage, ServerResponse } from "node:http";
import { HttpError } from "./errors.js";
import { requestPath } from "./target.js";

/** Handles one request on a matched route. */
export type RouteHandler = (req: IncomingMessage, res: ServerResponse, path: string) => unknown;

export interface Route {
  handler: RouteHandler;
  /** Answered without the bearer token (health checks). */
  public: boolean;
}

/**
 * A service's routes, by path then method. What matches no path is a 404 and a known path
 * with another method a 405, both read from the table itself (no hand-kept list of paths).
 */
export class RouteTable {
  private readonly byPath = new Map<string, Map<string, Route>>();

  add(method: string, path: string, handler: RouteHandler, options: { public?: boolean } = {}): this {
    let methods = this.byPath.get(path);
    if (!methods) this.byPath.set(path, (methods = new Map()));
    if (methods.has(method)) throw new Error(`route ${method} ${path} is defined twice`);
    methods.set(method, { handler, public: options.public ?? false });
    return this;
  }

  /** The route for a request, or the 404/405 to answer. */
  match(req: IncomingMessage): { route: Route; path: string } {
    const path = requestPath(req.url);
    const method = req.method ?? "GET";
    const methods = this.byPath.get(path);
    if (!methods) throw new HttpError(404, `no route ${method} ${path}`);
    const route = methods.get(method);
    if (!route) throw new HttpError(405, `method ${method} not allowed on ${path}`);
    return { route, path };
  }

  /** "METHOD /path" of every route, for tests and docs. */
  list(): string[] {
    return [...this.byPath].flatMap(([path, methods]) => [...methods.keys()].map((m) => `${m} ${path}`));
  }
}
