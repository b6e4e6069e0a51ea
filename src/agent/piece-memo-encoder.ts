import * as hfTokenizers from "@huggingface/tokenizers";

// Exported at run time; its re-export is not visible to TypeScript's NodeNext resolution.
type SplitCtor = new (config: object) => { pre_tokenize_text(text: string): string[] };
const SplitPreTokenizer = (hfTokenizers as unknown as { SplitPreTokenizer?: SplitCtor }).SplitPreTokenizer;

/**
 * Encoding with @huggingface/tokenizers costs ~6 µs per character in JavaScript (a 2 KB tool
 * result: ~12 ms), most of it per pre-token bookkeeping. Byte-level BPE tokenizers of the
 * GPT-4/Qwen/Llama 3 kind cut the text into pieces with one regex before BPE, and a piece's
 * ids never depend on its neighbours: so the ids of each piece are memoised and only new
 * pieces go through the library. Used only when the tokenizer.json has exactly that shape
 * (NFC or no normalizer; Split + ByteLevel without its own regex; BPE; added tokens without
 * strip flags or normalisation), and checked against the library at load; otherwise the
 * library encodes everything.
 */

type Encode = (text: string) => number[];

interface TokenizerJson {
  normalizer?: { type?: string } | null;
  pre_tokenizer?: { type?: string; pretokenizers?: Array<Record<string, unknown>> } | null;
  model?: { type?: string };
  added_tokens?: Array<{ id: number; content: string; lstrip?: boolean; rstrip?: boolean; normalized?: boolean }>;
}

const MAX_PIECES = 200_000;
const escape = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");

/** A memoising encoder equivalent to `libraryEncode`, or undefined when this tokenizer's shape is not the one it handles. */
export function pieceMemoEncoder(json: object, libraryEncode: Encode): Encode | undefined {
  const t = json as TokenizerJson;
  if (!SplitPreTokenizer) return undefined;
  if (t.normalizer && t.normalizer.type !== "NFC") return undefined;
  if (t.model?.type !== "BPE") return undefined;
  const pre = t.pre_tokenizer;
  const steps = pre?.type === "Sequence" ? (pre.pretokenizers ?? []) : [];
  const [split, byteLevel] = steps;
  if (steps.length !== 2 || split?.["type"] !== "Split" || split["invert"] === true || String(split["behavior"]).toLowerCase() !== "isolated") return undefined;
  if (byteLevel?.["type"] !== "ByteLevel" || byteLevel["use_regex"] !== false || byteLevel["add_prefix_space"] === true) return undefined;
  const added = t.added_tokens ?? [];
  if (added.some((a) => a.lstrip || a.rstrip || a.normalized)) return undefined;

  const splitter = new SplitPreTokenizer(split);
  const addedIds = new Map(added.map((a) => [a.content, a.id]));
  // Longest first: at each position the longest added token wins, as the library's trie does.
  const addedPattern = added.length > 0 ? new RegExp([...addedIds.keys()].sort((a, b) => b.length - a.length).map(escape).join("|"), "g") : undefined;
  const normalize = t.normalizer?.type === "NFC" ? (s: string) => s.normalize("NFC") : (s: string) => s;
  const memo = new Map<string, number[]>();

  const encodeSection = (section: string, out: number[]) => {
    for (const piece of splitter.pre_tokenize_text(normalize(section))) {
      let ids = memo.get(piece);
      if (!ids) {
        ids = libraryEncode(piece);
        if (memo.size >= MAX_PIECES) memo.clear();
        memo.set(piece, ids);
      }
      for (const id of ids) out.push(id);
    }
  };

  const encode: Encode = (text) => {
    const out: number[] = [];
    if (!addedPattern) {
      encodeSection(text, out);
      return out;
    }
    let last = 0;
    addedPattern.lastIndex = 0;
    for (let m = addedPattern.exec(text); m; m = addedPattern.exec(text)) {
      if (m.index > last) encodeSection(text.slice(last, m.index), out);
      out.push(addedIds.get(m[0])!);
      last = m.index + m[0].length;
    }
    if (last < text.length) encodeSection(text.slice(last), out);
    return out;
  };

  // Never trade correctness for speed: a tokenizer this reasoning does not fit stays on the library.
  const probe =
    "<|im_start|>user\nHello, world! It's 2025-11-23T19:22:00Z — naïve café, 東京 ́x\r\n\n  \tindent   {\"a\": [1, 22, 333]}\n\n\n<|im_end|>\n<tool_response>\n$ ls -la ./src\n</tool_response>   trailing  ";
  const same = (a: number[], b: number[]) => a.length === b.length && a.every((x, i) => x === b[i]);
  if (!same(encode(probe), libraryEncode(probe))) return undefined;
  memo.clear();
  return encode;
}
