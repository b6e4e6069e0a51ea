/**
 * An "env process" for the orphan scenario: starts a pool on the NomadProvisioner
 * (NOMAD_ADDR from the environment), takes a slot, runs a call, prints READY <jobId> and
 * then waits to be killed. SIGKILL gives it no chance to stop its job.
 */
import { NomadClient } from "../../../src/nomad/client.js";
import { NomadProvisioner } from "../../../src/pool/nomad-provisioner.js";
import { SlotPool } from "../../../src/pool/slot-pool.js";

const jobId = process.argv[2]!;
const client = NomadClient.fromEnv();
const provisioner = new NomadProvisioner({ slotsPerContainer: 1, client, job: { jobId }, blockingWaitMs: 2_000 });
const pool = new SlotPool({ slotsPerContainer: 1, minContainers: 1, maxContainers: 1, provisioner });
await pool.start();
const slot = await pool.acquire({ trajectoryId: "doomed" });
const r = await slot.execute({ tool: "bash", args: { command: "echo working" } });
process.stdout.write(`READY ${jobId} ${r.output.trim()}\n`);
setInterval(() => undefined, 60_000);
