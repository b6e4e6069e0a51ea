import { describe, expect, it } from "vitest";
import { tokenSegmentsFromServer, tokensFromServer } from "../../src/env/tokens.js";
import type { TurnRecord } from "../../src/agent/agent-loop.js";

const turn = (n: number, prompt: number[], completion: number[], logprobs?: number[]): TurnRecord => ({
  turn: n,
  finishReason: "stop",
  toolCalls: 0,
  tokens: { promptTokenIds: prompt, completionTokenIds: completion, ...(logprobs ? { completionLogprobs: logprobs } : {}) },
});

describe("tokens and masks from the inference server's ids", () => {
  it("extends turn by turn: earlier completions stay trained, tool results are masked", () => {
    const seq = tokensFromServer([turn(1, [1, 2], [3, 4], [-0.1, -0.2]), turn(2, [1, 2, 3, 4, 5, 6], [7], [-0.3])])!;
    expect(seq.tokens).toEqual([1, 2, 3, 4, 5, 6, 7]);
    expect(seq.masks).toEqual([-100, -100, 3, 4, -100, -100, 7]);
    expect(seq.logprobs).toEqual([1, 1, -0.1, -0.2, 1, 1, -0.3]);
    expect(seq.source).toBe("inference-server");
  });

  it("restarts at a prompt that rewrites history, all of it masked; the finished segment is kept as a sample of its own", () => {
    const turns = [turn(1, [1, 2], [3, 4]), turn(2, [1, 2, 3, 4, 5], [6]), turn(3, [1, 9, 9, 5], [7], [-0.3])];
    const seq = tokensFromServer(turns)!;
    expect(seq.tokens).toEqual([1, 9, 9, 5, 7]);
    expect(seq.masks).toEqual([-100, -100, -100, -100, 7]);
    expect(seq.logprobs).toEqual([1, 1, 1, 1, -0.3]);
    const segments = tokenSegmentsFromServer(turns)!;
    expect(segments).toHaveLength(2);
    expect(segments[0]!.tokens).toEqual([1, 2, 3, 4, 5, 6]);
    expect(segments[0]!.masks).toEqual([-100, -100, 3, 4, -100, 6]);
    // no logprobs for a segment unless every one of its turns has them
    expect(segments[0]!.logprobs).toBeUndefined();
    expect(segments.every((s) => s.tokenExact === false)).toBe(true);
  });

  it("returns null when a turn has no ids (never invents them)", () => {
    expect(tokensFromServer([turn(1, [1], [2]), { turn: 2, finishReason: "stop", toolCalls: 0 }])).toBeNull();
    expect(tokensFromServer([])).toBeNull();
  });
});
