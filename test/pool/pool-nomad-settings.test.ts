/**
 * The sandbox job's resources and placement are configuration (issue 29): cpu, memoryMb,
 * constraints and spreads from the pool section and executor-server flags reach the job
 * Nomad runs; a memory too small for the slots is refused naming both settings; a placement
 * failure names the setting to change.
 */
import { describe, expect, it } from "vitest";
import { backendConfigFromFlags, POOL_FLAGS } from "../../src/cli/backend-flags.js";
import { parseFlags } from "../../src/cli/usage.js";
import { sandboxJobHcl } from "../../src/nomad/job-hcl.js";
import { PoolSettingsSchema } from "../../src/pool/config.js";
import { placementAdvice } from "../../src/pool/nomad-placement.js";
import { useNomadHarness } from "./support/nomad-harness.js";

const h = useNomadHarness("settings-test");

describe("the sandbox job's resources and placement as configuration", () => {
  it("a memory too small for the slots is refused at the config, naming pool.nomad.memoryMb and pool.slotsPerContainer", () => {
    const bad = PoolSettingsSchema.safeParse({ provisioner: "nomad", slotsPerContainer: 16, nomad: { memoryMb: 512 } });
    expect(bad.success).toBe(false);
    const issue = bad.error!.issues[0]!;
    expect(issue.path).toEqual(["nomad", "memoryMb"]);
    expect(issue.message).toMatch(/16 slots \(pool\.slotsPerContainer\) do not fit in 512 MB.*raise pool\.nomad\.memoryMb to 1152 or more, or lower pool\.slotsPerContainer to 6 or fewer/);
    expect(PoolSettingsSchema.safeParse({ provisioner: "nomad", slotsPerContainer: 6, nomad: { memoryMb: 512 } }).success).toBe(true);
    expect(PoolSettingsSchema.safeParse({ nomad: { cpu: 0 } }).success).toBe(false);
    expect(PoolSettingsSchema.safeParse({ nomad: { spreads: [{ attribute: "${node.unique.id}", weight: 101 }] } }).success).toBe(false);
  });

  it("executor-server flags --cpu and --memory-mb set pool.nomad.cpu / memoryMb; a bad one names its flag", () => {
    const flags = parseFlags(["--cpu", "250", "--memory-mb", "700", "--slots-per-container", "2"], Object.fromEntries(Object.keys(POOL_FLAGS).map((f) => [f, { type: "string" as const }])), "help")!;
    const config = backendConfigFromFlags(flags, POOL_FLAGS);
    expect(config.pool.nomad).toMatchObject({ cpu: 250, memoryMb: 700 });
    const tooSmall = parseFlags(["--memory-mb", "200", "--slots-per-container", "4"], Object.fromEntries(Object.keys(POOL_FLAGS).map((f) => [f, { type: "string" as const }])), "help")!;
    expect(() => backendConfigFromFlags(tooSmall, POOL_FLAGS)).toThrow(/--memory-mb 200: 4 slots \(pool\.slotsPerContainer\) do not fit in 200 MB/);
  });

  it("cpu, memory, constraints and spreads reach the job Nomad runs (and the rendered HCL)", async () => {
    const nomad = PoolSettingsSchema.parse({
      provisioner: "nomad",
      slotsPerContainer: 2,
      nomad: {
        cpu: 250,
        memoryMb: 700,
        constraints: [{ attribute: "${attr.kernel.name}", operator: "=", value: "linux" }],
        spreads: [{ attribute: "${node.unique.id}", weight: 80 }],
      },
    }).nomad;
    const { shareJob: _share, ...job } = nomad;
    const jobId = `settings-test-${process.pid}-res`;
    const { pool } = h.nomadPool({ slotsPerContainer: 2 }, { job: { ...job, jobId } });
    await pool.start();
    const read = await h.client().readJob(jobId);
    const task = read!.TaskGroups![0]!.Tasks![0]! as { Resources?: { CPU?: number; MemoryMB?: number } };
    expect(task.Resources).toMatchObject({ CPU: 250, MemoryMB: 700 });
    expect((read as { Spreads?: unknown }).Spreads).toEqual([{ Attribute: "${node.unique.id}", Weight: 80 }]);
    expect(read!.Constraints).toContainEqual(expect.objectContaining({ LTarget: "${attr.kernel.name}", RTarget: "linux" }));
    const hcl = sandboxJobHcl({ jobId, slots: 2, token: "t", spreads: [{ attribute: "${node.unique.id}", targets: [{ value: "n1", percent: 50 }] }] });
    expect(hcl).toMatch(/spread \{\s*attribute = "\$\{node\.unique\.id\}"\s*weight\s*= 50\s*target "n1" \{\s*percent = 50/);
  });

  it("a placement failure names the setting to change", () => {
    expect(placementAdvice("group sandbox: DimensionExhausted: cpu (3); 2 allocations unplaced")).toMatch(/pool\.nomad\.cpu.*pool\.nomad\.memoryMb.*--cpu \/ --memory-mb/);
    expect(placementAdvice("group sandbox: ConstraintFiltered: ${meta.sandbox} = yes (3)")).toMatch(/pool\.nomad\.constraints/);
  });
});
