/**
 * Issue 38, hole 3: code left in a slot's spawner. ptrace is allowed in slots (strace, gdb
 * work on the command's own processes), and the spawner — the process that starts every
 * `bash` call of the slot and survives from call to call — runs as the slot's uid in the same
 * namespace. A command once attached gdb to it, injected a thread, and that thread ran on
 * through later calls (kill(-1) at a call's end spares the caller's own threads) and the
 * episode's reward calls. The spawner now makes itself non-dumpable: a process without
 * CAP_SYS_PTRACE cannot attach to it, read or write its memory, or read its environment.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startAttackServer, type AttackServer } from "./support.js";

let server: AttackServer;
beforeAll(async () => {
  server = await startAttackServer({ slots: 1, extraArgs: ["--memory-mb", "2048", "--timeout", "120"] });
}, 120_000);
afterAll(async () => {
  await server?.stop();
});

/** The spawner's pid as the slot sees it (its process name is the file name, spawner). */
const FIND_SPAWNER = `sp=$(for d in /proc/[0-9]*; do [ "$(cat $d/comm 2>/dev/null)" = spawner ] && basename $d; done | head -1); echo "spawner=$sp"`;

describe("the slot's spawner cannot be reached by ptrace from the slot", () => {
  it("gdb cannot attach to the spawner (so no thread can be injected), while it still debugs the command's own processes", async () => {
    const which = await server.bash(0, "command -v gdb || echo MISSING");
    expect(which.output, "gdb is missing inside the slot (scripts/setup.sh installs it)").not.toContain("MISSING");
    const r = await server.bash(0, `${FIND_SPAWNER}; gdb -q -batch -p "$sp" -ex 'call (int)getpid()' -ex detach 2>&1 | grep -E 'ptrace: |^\\$1 = ' | head -2`, { timeout: 90 });
    expect(r.output).toMatch(/^spawner=\d+\n/);
    // Attached, gdb would print "$1 = <pid>" (the call ran inside the spawner).
    expect(r.output).not.toMatch(/\$1 = /);
    expect(r.output).toMatch(/ptrace: Operation not permitted/);
    const own = await server.bash(0, `sleep 30 & p=$!; gdb -q -batch -p $p -ex 'call (int)getpid()' -ex detach 2>&1 | grep -E '^\\$1 = ' ; kill $p`, { timeout: 90 });
    expect(own.output).toMatch(/^\$1 = \d+$/m);
  }, 180_000);

  it("the spawner's memory and environment are closed to the slot (/proc/PID/mem, /proc/PID/environ)", async () => {
    const r = await server.bash(0, `${FIND_SPAWNER}; head -c 16 /proc/$sp/environ >/dev/null 2>&1 && echo environ-read; dd if=/proc/$sp/mem bs=1 count=1 skip=4096 >/dev/null 2>&1 && echo mem-read; echo done`);
    expect(r.output).toMatch(/^spawner=\d+\n/);
    expect(r.output).not.toContain("environ-read");
    expect(r.output).not.toContain("mem-read");
    expect(r.output).toContain("done");
  });

  it("the namespace's init is out of reach too (a thread there would survive every call's kill(-1) as well)", async () => {
    const r = await server.bash(0, `gdb -q -batch -p 1 -ex 'call (int)getpid()' -ex detach 2>&1 | grep -E 'ptrace: |^\\$1 = ' | head -1; head -c 16 /proc/1/environ >/dev/null 2>&1 && echo environ-read; echo done`, { timeout: 90 });
    expect(r.output).not.toMatch(/\$1 = /);
    expect(r.output).not.toContain("environ-read");
  }, 120_000);
});
