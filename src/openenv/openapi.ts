/**
 * GET /openapi.json: the HTTP routes of the OpenEnv server as an OpenAPI document. OpenEnv's
 * servers (FastAPI) publish one, and its runtime checks (`openenv validate URL`) read the API
 * version from `info.version` and the mode from `paths`: with /reset, /step and /state it is
 * "simulation" mode, which is what this server serves.
 */
export function openApiDocument(envName: string): Record<string, unknown> {
  const json = (description: string) => ({ description, content: { "application/json": { schema: { type: "object" } } } });
  const body = (description: string) => ({ required: false, content: { "application/json": { schema: { type: "object", description } } } });
  return {
    openapi: "3.1.0",
    // 1.x: the OpenEnv HTTP profile (openenv-http/1.x) these routes follow.
    info: { title: `slotpool env '${envName}' as an OpenEnv environment`, version: "1.0.0", description: "See docs/trainers.md. WebSocket sessions are at /ws." },
    paths: {
      "/health": { get: { summary: "Health check", responses: { "200": json('{"status": "healthy"}') } } },
      "/metadata": { get: { summary: "The environment's name and description", responses: { "200": json("EnvironmentMetadata") } } },
      "/schema": { get: { summary: "JSON Schemas of action, observation, reset_observation and state", responses: { "200": json("SchemaResponse") } } },
      "/state": { get: { summary: "Stateless HTTP has no episode: the empty state and the server's counts", responses: { "200": json("State") } } },
      "/reset": { post: { summary: "Set up an episode of the item seed / episode_id selects and answer its task", requestBody: body("ResetRequest {seed?, episode_id?}"), responses: { "200": json("ResetResponse") } } },
      "/step": { post: { summary: "A single-step episode: the action runs in a fresh episode, which is then scored", requestBody: body("StepRequest {action, seed?, episode_id?}"), responses: { "200": json("StepResponse"), "422": json("the action is not valid") } } },
      "/mcp": { post: { summary: "MCP: the streamable HTTP transport (Mcp-Session-Id), and OpenEnv's JSON-RPC (openenv/session/create)", requestBody: body("JSON-RPC 2.0"), responses: { "200": json("JSON-RPC 2.0 answer") } } },
      "/run": { post: { summary: "One rollout of the env's own agent loop on the trainer's model endpoint", requestBody: body("{item or seed, model: {base_url, model, ...}}"), responses: { "200": json("the scored trajectory"), "422": json("the request is not valid") } } },
    },
  };
}
