/** The same text many times (every group failing for one cause): each distinct text once, with its count, in first-seen order. */
export function countRepeats(texts: readonly string[]): Array<{ text: string; count: number }> {
  const counts = new Map<string, number>();
  for (const t of texts) counts.set(t, (counts.get(t) ?? 0) + 1);
  return [...counts].map(([text, count]) => ({ text, count }));
}

/** "reason" or "reason × 48". */
export function withCount(r: { text: string; count: number }): string {
  return r.count > 1 ? `${r.text} × ${r.count}` : r.text;
}
