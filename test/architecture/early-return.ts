import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import ts from "typescript";

/**
 * Finds tests that can pass by returning early: an `if (...) return` among the top-level
 * statements of a test's body whose branch asserts nothing. A missing precondition must
 * skip the test with a reason (`it.skipIf(cond)("... skipped without X", ...)` or
 * `ctx.skip("why")`), so the run says what was not checked. Allowed: the narrowing idiom
 * right after the assertion on the same value (`expect(r.ok).toBe(true); if (!r.ok) return;`),
 * which cannot pass without that assertion passing first. A source scan, kept apart from
 * the test so a test can feed it made-up sources.
 */

const TEST_FUNCTIONS = new Set(["it", "test"]);

/** `it(...)`, `test(...)`, `it.skipIf(c)(...)`, `it.only(...)`, `test.concurrent(...)` and the like. */
function isTestCall(call: ts.CallExpression): boolean {
  let callee: ts.Expression = call.expression;
  if (ts.isCallExpression(callee)) callee = callee.expression; // it.skipIf(cond)(...)
  while (ts.isPropertyAccessExpression(callee)) callee = callee.expression;
  return ts.isIdentifier(callee) && TEST_FUNCTIONS.has(callee.text);
}

function containsExpect(node: ts.Node): boolean {
  let found = false;
  const visit = (n: ts.Node): void => {
    if (found) return;
    if (ts.isCallExpression(n)) {
      let c: ts.Expression = n.expression;
      while (ts.isPropertyAccessExpression(c)) c = c.expression;
      if (ts.isIdentifier(c) && (c.text === "expect" || c.text === "assert")) {
        found = true;
        return;
      }
    }
    ts.forEachChild(n, visit);
  };
  visit(node);
  return found;
}

function returns(statement: ts.Statement): boolean {
  if (ts.isReturnStatement(statement)) return true;
  return ts.isBlock(statement) && statement.statements.some((s) => ts.isReturnStatement(s));
}

/** The early exits in one file's source, as "file:line: text". */
export function earlyReturns(file: string, source: string): string[] {
  const sf = ts.createSourceFile(file, source, ts.ScriptTarget.Latest, true, ts.ScriptKind.TS);
  const out: string[] = [];
  const visit = (node: ts.Node): void => {
    if (ts.isCallExpression(node) && isTestCall(node)) {
      const fn = node.arguments.find((a): a is ts.ArrowFunction | ts.FunctionExpression => ts.isArrowFunction(a) || ts.isFunctionExpression(a));
      if (fn && ts.isBlock(fn.body)) {
        const statements = fn.body.statements;
        statements.forEach((s, i) => {
          if (!ts.isIfStatement(s) || !returns(s.thenStatement) || containsExpect(s.thenStatement)) return;
          const operand = s.expression.getText(sf).replace(/^!\s*/, "");
          const previous = i > 0 ? statements[i - 1]!.getText(sf) : "";
          if (previous.startsWith(`expect(${operand}`)) return; // the narrowing idiom
          const line = sf.getLineAndCharacterOfPosition(s.getStart(sf)).line + 1;
          out.push(`${file}:${line}: ${s.getText(sf).split("\n")[0]}`);
        });
      }
    }
    ts.forEachChild(node, visit);
  };
  visit(sf);
  return out;
}

function testFiles(dir: string): string[] {
  const out: string[] = [];
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) out.push(...testFiles(path));
    else if (entry.name.endsWith(".test.ts")) out.push(path);
  }
  return out;
}

/** Every early exit in the test files under dir. */
export function earlyReturnsUnder(dir: string): string[] {
  return testFiles(dir).flatMap((f) => earlyReturns(f.slice(dir.length + 1), readFileSync(f, "utf8")));
}
