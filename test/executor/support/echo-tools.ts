/** External tools for tests: one echoes its context, one sleeps (for concurrency and timeouts). */
import { z } from "zod";
import { defineExternalTool, type ExternalTool } from "../../../src/executor/external-tool.js";

export interface SleepProbe {
  running: number;
  peak: number;
}

export function testTools(probe: SleepProbe = { running: 0, peak: 0 }): ExternalTool[] {
  return [
    defineExternalTool({
      name: "echo_context",
      description: "Echoes the call's context.",
      parameters: z.object({ text: z.string() }),
      execute: (args, ctx) => ({
        output: args.text,
        metadata: { trajectory_id: ctx.trajectoryId ?? null, slot_id: ctx.slotId ?? null, container_addr: ctx.containerAddr ?? null, args },
      }),
    }),
    defineExternalTool({
      name: "slow",
      description: "Sleeps.",
      parameters: z.object({ ms: z.number().int().nonnegative() }),
      execute: async (args, ctx) => {
        probe.running++;
        probe.peak = Math.max(probe.peak, probe.running);
        try {
          await new Promise<void>((resolve) => {
            const t = setTimeout(resolve, args.ms);
            ctx.signal.addEventListener("abort", () => {
              clearTimeout(t);
              resolve();
            });
          });
          return `slept ${args.ms}`;
        } finally {
          probe.running--;
        }
      },
    }),
    defineExternalTool({
      name: "explode",
      description: "Throws.",
      parameters: z.object({}),
      execute: () => {
        throw new Error("kaboom");
      },
    }),
  ];
}
