import { describe, expect, it } from "vitest";
import { ExecuteRequestSchema, ExecuteResponseSchema } from "../../src/protocol/sandbox.js";

describe("sandbox wire protocol", () => {
  it("accepts the original client's execute body and defaults args", () => {
    const parsed = ExecuteRequestSchema.parse({ slot_id: "slot_3", tool: "bash", args: { command: "ls" }, execution_id: "e1", timeout: 30 });
    expect(parsed.slot_id).toBe("slot_3");
    expect(ExecuteRequestSchema.parse({ slot_id: "slot_0", tool: "bash" }).args).toEqual({});
  });

  it("names the offending field when a body is malformed", () => {
    const result = ExecuteRequestSchema.safeParse({ slot_id: "nope", tool: "bash" });
    expect(result.success).toBe(false);
    expect(result.error?.issues[0]?.path).toEqual(["slot_id"]);
  });

  it("keeps metadata keys it does not know", () => {
    const parsed = ExecuteResponseSchema.parse({
      success: true, output: "", error: "", execution_id: null,
      metadata: { exit_code: 0, sandboxed: true, network_isolated: true, extra: 1 },
    });
    expect(parsed.metadata["extra"]).toBe(1);
  });
});
