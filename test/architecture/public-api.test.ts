import { existsSync, readFileSync } from "node:fs";
import { fileURLToPath, pathToFileURL } from "node:url";
import { describe, expect, it } from "vitest";
import * as root from "../../src/index.js";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));

/**
 * Each subpath's runtime names, exactly (types vanish at run time; the index files list them
 * by name too). A change here is a deliberate edit of the public API: say why in the commit.
 */
const SUBPATH_NAMES: Record<string, string[]> = {
    "./protocol": ["ArtifactArchiveRequestSchema", "ArtifactArchiveResponseSchema", "ArtifactEntrySchema", "ArtifactListRequestSchema", "ArtifactListResponseSchema", "ArtifactReadRequestSchema", "ArtifactReadResponseSchema", "BashArgsSchema", "BashStatefulArgsSchema", "BatchRequestSchema", "BatchResponseSchema", "BatchStreamLineSchema", "ErrorBodySchema", "ExecuteMetadataSchema", "ExecuteRequestSchema", "ExecuteResponseSchema", "ExecutorArtifactArchiveRequestSchema", "ExecutorArtifactListRequestSchema", "ExecutorArtifactReadRequestSchema", "ExecutorExecuteRequestSchema", "ExecutorForkRequestSchema", "ExecutorForkResponseSchema", "ExecutorPrepareWorkspaceRequestSchema", "ExecutorPrepareWorkspaceResponseSchema", "ExecutorReleaseRequestSchema", "ForkRequestSchema", "ForkResponseSchema", "HealthResponseSchema", "INFRA_MARKER", "ISOLATION_ARG_NAMES", "IsolationArgsSchema", "IsolationSummarySchema", "ReadFileArgsSchema", "ResetRequestSchema", "ResetResponseSchema", "SANDBOX_TOOLS", "SlotIdSchema", "SlotStateSchema", "SlotpoolError", "SlotsResponseSchema", "TOOL_INFRA_CAUSES", "TOOL_TABLE", "TemplateBuildRequestSchema", "TemplateBuildResponseSchema", "TemplateInfoSchema", "TemplateListResponseSchema", "TemplateNameSchema", "TmuxArgsSchema", "ToolCallSchema", "ToolResultSchema", "ToolServerExecuteRequestSchema", "WriteFileArgsSchema", "builtinTool", "builtinToolNames", "toolInfraCause"], // 55
    "./pool": ["ImageReferenceError", "ImageUnavailableError", "LocalProvisioner", "NomadJobSettingsSchema", "NomadProvisioner", "PoolError", "PoolNotRunningError", "PoolSettingsSchema", "PoolTemplateError", "ProvisionerError", "SandboxClient", "SandboxRequestError", "SandboxStartError", "SlotAcquireTimeoutError", "SlotForkError", "SlotLostError", "SlotPool", "SlotPoolConfigError", "SlotPoolConfigSchema", "SlotReleasedError", "isSlotLostError", "parseSlotPoolConfig", "startSandboxProcess"], // 23
    "./nomad": ["DEFAULT_NOMAD_ADDR", "NomadAclDeniedError", "NomadClient", "NomadConfigError", "NomadError", "NomadNotFoundError", "NomadResponseError", "NomadScaleBlockedError", "NomadTimeoutError", "NomadUnreachableError", "SandboxJobOptionError", "allocationHttpAddress", "allocationNameIndex", "isAllocationRunning", "isAllocationTerminal", "latestTaskEvents", "nomadOptionsFromEnv", "resolveSandboxJobOptions", "sandboxJob", "sandboxJobHcl"], // 20
    "./executor": ["ExecutorClosedError", "ExecutorServer", "ToolBackendConfigError", "ToolBackendConfigSchema", "ToolExecutor", "ToolExecutorConfigError", "ToolExecutorConfigSchema", "ToolModuleError", "ToolServer", "ToolServerClient", "ToolServerError", "createToolBackend", "defineExternalTool", "parseToolBackendConfig", "parseToolExecutorConfig"], // 15
    "./e2b": ["BASE_TEMPLATE", "DEFAULT_TIMEOUT_S", "E2bApiError", "E2bServer", "E2bUnsupportedError", "ENVD_VERSION", "SandboxRegistry"], // 7
    "./tools": ["BUILTIN_DISTRIBUTIONS", "BUILTIN_TOOLS", "BUILTIN_TOOLSETS", "DuplicateToolError", "HermesParseError", "InvalidToolDefinitionError", "ToolArgumentsError", "ToolCallFormatError", "ToolError", "ToolRegistry", "ToolsConfigSchema", "Toolsets", "UnknownToolError", "UnknownToolsetError", "defineTool", "formatHermesToolCall", "formatHermesToolResponse", "fromOpenAiToolCalls", "parseHermesToolCalls", "resolveGroupTools", "seededRng", "toOpenAiTool", "toOpenAiToolCalls"], // 23
    "./agent": ["AgentError", "ChatCompletionsClient", "ChatModelPolicy", "ChatRequestError", "ChatResponseError", "ChatTemplateError", "InfraToolError", "ModelConfigSchema", "ModelServerError", "OraclePolicy", "TOOL_CALL_PARSERS", "TemplateMismatchError", "TokenExactPolicy", "checkModelServer", "hermesToolsSystemPrompt", "loadChatTokenizer", "probeTokenBackend", "runAgentLoop"], // 18
    "./env": ["AgentEnv", "AgentEnvConfigSchema", "EnvConfigError", "EnvError", "INFRA_CAUSES", "INFRA_FAILURE_POLICIES", "ItemImageError", "MOVED_CONFIG_KEYS", "NoPolicyError", "OutputPathError", "PathRefusedError", "RunStats", "TokenizerLoadError", "TokensInexactError", "TokensUnavailableError", "ToolContext", "ToolContextError", "ToolContextInfraError", "TrajectoryFailedError", "buildScoredGroup", "createDefaultBackend", "defineEnvTool", "formatSummary", "loadTokenizerJson", "poolBackend", "runEvaluateMode", "runProcessMode", "runServeMode", "unknownConfigKeys", "withConfigDefaults"], // 30
    "./atropos": ["AtroposClient", "AtroposError", "InfoSchema", "RegisterEnvResponseSchema", "StatusEnvSchema", "TrainerConfigSchema", "filterGroupForSend", "pythonJsonDumps", "runEnvManager"], // 9
    "./report": ["ReportBuilder", "ReportInputError", "readReportModel", "renderReport", "reportPathFor", "summarize", "writeReport"], // 7
    "./sandbox": ["DEFAULT_LIMITS", "SandboxServer"], // 2
};

/** Where each subpath's index lives in src/ (package.json points at its build in dist/). */
const SOURCE_OF = (key: string) => `../../src/${key === "./atropos" ? "env/atropos" : key.slice(2)}/index.js`;

describe("the public API", () => {
  it("the root lists by name what env authors and pool users need, and no more", () => {
    const names = Object.keys(root).sort();
    // Values only (types vanish at run time); with the types the root holds about 40 names.
    expect(names).toEqual(
      [
        "AgentEnv",
        "EnvError",
        "ExecutorServer",
        "LocalProvisioner",
        "NomadProvisioner",
        "PoolNotRunningError",
        "ProvisionerError",
        "SlotAcquireTimeoutError",
        "SlotLostError",
        "SlotPool",
        "PoolError",
        "SlotReleasedError",
        "SlotForkError",
        "SlotpoolError",
        "ToolContext",
        "ToolContextError",
        "ToolContextInfraError",
        "PathRefusedError",
        "ToolExecutor",
        "ToolServer",
        "createToolBackend",
        "defineEnvTool",
        "defineExternalTool",
        "defineTool",
        "isSlotLostError",
      ].sort(),
    );
  });

  it("every error slotpool raises has the SlotpoolError base and a stable code", () => {
    const lost = new root.SlotLostError("slot_0", "alloc-1", "the node died", "t1");
    expect(lost).toBeInstanceOf(root.SlotpoolError);
    expect(lost).toBeInstanceOf(root.PoolError);
    expect(lost.code).toBe("SLOT_LOST");
    expect(new root.PoolNotRunningError("stopped").code).toBe("POOL_NOT_RUNNING");
    expect(new root.EnvError("bad config").code).toBe("ENV");
    // A reward that catches a ToolContext error can tell the infrastructure's (rethrow it) from its own.
    const cut = new root.ToolContextInfraError("bash could not run to its end", "bash", "sandbox_start");
    expect(cut).toBeInstanceOf(root.ToolContextError);
    expect(cut.code).toBe("TOOL_CONTEXT_INFRA");
    expect(cut.infraCause).toBe("sandbox_start");
  });

  it("one check recognises a lost slot, also from another copy of the module", () => {
    expect(root.isSlotLostError(new root.SlotLostError("slot_0", "a", "gone"))).toBe(true);
    const foreign = Object.assign(new Error("slot lost"), { name: "SlotLostError" });
    expect(root.isSlotLostError(foreign)).toBe(true);
    expect(root.isSlotLostError(Object.assign(new Error("x"), { code: "SLOT_LOST" }))).toBe(true);
    expect(root.isSlotLostError(new root.PoolError("other"))).toBe(false);
    expect(root.isSlotLostError("SlotLostError")).toBe(false);
  });

  it("each subpath lists its names: exactly these, and no index re-exports a whole module", async () => {
    const pkg = JSON.parse(readFileSync(`${ROOT}package.json`, "utf8")) as { exports: Record<string, unknown> };
    const subpaths = Object.keys(pkg.exports).filter((k) => k !== "." && k !== "./package.json");
    expect(subpaths.sort()).toEqual(Object.keys(SUBPATH_NAMES).sort());
    for (const key of subpaths) {
      const mod = (await import(SOURCE_OF(key))) as Record<string, unknown>;
      expect(Object.keys(mod).sort(), key).toEqual(SUBPATH_NAMES[key]);
      const text = readFileSync(fileURLToPath(new URL(SOURCE_OF(key).replace(/\.js$/, ".ts"), import.meta.url)), "utf8");
      expect(text, `${key}: export * hides what the subpath offers`).not.toMatch(/^export (type )?\* from/m);
    }
    expect(readFileSync(`${ROOT}src/index.ts`, "utf8")).not.toMatch(/^export (type )?\* from/m);
  });

  it("each subpath export of package.json points at a built module (npm test builds first)", async () => {
    const pkg = JSON.parse(readFileSync(`${ROOT}package.json`, "utf8")) as { exports: Record<string, string | { default: string; types: string }> };
    const subpaths = Object.keys(pkg.exports).filter((k) => k !== "." && k !== "./package.json");
    expect(subpaths).toEqual(expect.arrayContaining(["./protocol", "./pool", "./nomad", "./executor", "./tools", "./agent", "./env", "./atropos", "./sandbox"]));
    for (const key of subpaths) {
      const entry = pkg.exports[key] as { default: string; types: string };
      const file = `${ROOT}${entry.default}`;
      expect(existsSync(file), `${key} -> ${entry.default}`).toBe(true);
      const mod = (await import(pathToFileURL(file).href)) as Record<string, unknown>;
      expect(Object.keys(mod).length, key).toBeGreaterThan(0);
    }
  });
});
