/**
 * Which nodes the pool keeps out of placements after losing containers there (node-avoidance.ts):
 * a node that lost every container the pool had on it, while another node still serves, for a
 * window after its last loss; never every node.
 */
import { describe, expect, it } from "vitest";
import { silentLogger } from "../../src/observability/logger.js";
import { NodeAvoidance } from "../../src/pool/node-avoidance.js";

function harness(windowMs = 60_000) {
  const calls: string[][] = [];
  const live: string[] = [];
  const avoidance = new NodeAvoidance(
    {
      provisioner: {
        avoidNodes: async (nodes) => {
          calls.push([...nodes]);
        },
      },
      logger: silentLogger(),
      liveNodes: () => live,
    },
    windowMs,
  );
  return { calls, live, avoidance };
}

describe("NodeAvoidance", () => {
  it("avoids a node once it has no live container left, while another node serves", async () => {
    const { calls, live, avoidance } = harness();
    live.push("A", "B");
    avoidance.containerLost("A"); // A's other container still answers: A serves, not avoided
    await avoidance.settled();
    expect(calls).toEqual([]);
    live.splice(live.indexOf("A"), 1);
    avoidance.containerLost("A");
    await avoidance.settled();
    expect(calls).toEqual([["A"]]);
    expect(avoidance.nodes).toEqual(["A"]);
    avoidance.stop();
  });

  it("never avoids every node: a one-node cluster keeps placing where it can", async () => {
    const { calls, live, avoidance } = harness();
    avoidance.containerLost("A"); // nothing live anywhere: avoiding A would leave no node
    await avoidance.settled();
    expect(calls).toEqual([]);
    live.push("A"); // its container restarted in place
    avoidance.containerLost("A"); // A still has a live container: not avoided
    await avoidance.settled();
    expect(calls).toEqual([]);
    // A second node lost while A is avoided: B would be the last one serving...
    const two = harness();
    two.live.push("C");
    two.avoidance.containerLost("A");
    two.live.length = 0;
    two.avoidance.containerLost("C"); // ...no node would be left: C stays allowed
    await two.avoidance.settled();
    expect(two.calls).toEqual([["A"]]);
    avoidance.stop();
    two.avoidance.stop();
  });

  it("lets the node back in once the window after its last loss has passed", async () => {
    const { calls, live, avoidance } = harness(300);
    live.push("B");
    avoidance.containerLost("A");
    await avoidance.settled();
    expect(calls).toEqual([["A"]]);
    const t0 = Date.now();
    while (calls.length < 2 && Date.now() - t0 < 10_000) await new Promise((r) => setTimeout(r, 50));
    await avoidance.settled();
    expect(calls).toEqual([["A"], []]);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(250);
    avoidance.stop();
  });

  it("a provisioner that cannot avoid nodes is left alone", () => {
    const avoidance = new NodeAvoidance({ provisioner: {}, logger: silentLogger(), liveNodes: () => ["B"] }, 1_000);
    avoidance.containerLost("A");
    expect(avoidance.nodes).toEqual([]);
  });
});
