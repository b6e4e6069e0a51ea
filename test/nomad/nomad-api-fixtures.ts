/**
 * Access to test/fixtures/nomad-api/ (Nomad's documented bodies; its README says where each
 * comes from). Inside the repository: a clone with nothing beside it runs every test.
 */
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseNomadJson } from "../../src/nomad/json.js";

const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
export const NOMAD_API_DIR = resolve(repoRoot, "test", "fixtures", "nomad-api");

export function fixtureText(name: string): string {
  return readFileSync(join(NOMAD_API_DIR, name), "utf8");
}

/** A fixture parsed the way the client parses answers (big integers kept exact). */
export function fixture(name: string): unknown {
  return parseNomadJson(fixtureText(name));
}

/** Every JSON/NDJSON example body (not the index or the field list), with paths relative to the dir. */
export function exampleFiles(): string[] {
  const out: string[] = [];
  const walk = (rel: string) => {
    for (const entry of readdirSync(join(NOMAD_API_DIR, rel), { withFileTypes: true })) {
      const path = rel ? `${rel}/${entry.name}` : entry.name;
      if (entry.isDirectory()) walk(path);
      else if (/\.(json|ndjson)$/.test(entry.name) && !["fields.json", "INDEX.json"].includes(path)) out.push(path);
    }
  };
  walk("");
  return out.sort();
}

interface FieldList {
  file: string;
  fields: Array<{ json?: string; embedded?: string }>;
}

/** JSON field names of a struct in fields.json (`api` = request side, `wire` = response side), embedded structs inlined. */
export function structFields(section: "api" | "wire", struct: string): Set<string> {
  const all = JSON.parse(fixtureText("fields.json")) as Record<"api" | "wire", Record<string, FieldList>>;
  const entry = all[section][struct];
  if (!entry) throw new Error(`fields.json has no ${section}.${struct}`);
  const names = new Set<string>();
  for (const f of entry.fields) {
    if (f.json) names.add(f.json);
    if (f.embedded && all[section][f.embedded]) for (const n of structFields(section, f.embedded)) names.add(n);
  }
  return names;
}
