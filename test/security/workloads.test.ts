/**
 * Ordinary agent workloads still work under the slots' seccomp filter (issue 28): each tool
 * runs inside a real slot of a real server, with the filter in force (checked first). A tool
 * this machine lacks fails its test naming the package (scripts/setup.sh installs them),
 * never passes silently.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startAttackServer, type AttackServer } from "./support.js";

let server: AttackServer;
beforeAll(async () => {
  // Room for compilers and V8: a non-root server bounds memory per process (RLIMIT_AS), and
  // V8 reserves more address space than the attack suite's 256 MB (these flags come last: they win).
  server = await startAttackServer({ slots: 2, extraArgs: ["--memory-mb", "4096", "--disk-mb", "1024", "--max-processes", "512", "--timeout", "120"] });
}, 120_000);
afterAll(async () => {
  await server?.stop();
});

/** Runs `script` in slot 0 after checking `tools` exist there; returns its output (exit code asserted 0). */
async function run(tools: string[], script: string, timeout = 120): Promise<string> {
  const which = await server.bash(0, tools.map((t) => `command -v ${t} >/dev/null || echo "MISSING ${t}"`).join("; "));
  expect(which.output, `tools absent inside the slot (install them with scripts/setup.sh): ${which.output}`).toBe("");
  const r = await server.bash(0, `set -e; cd "$(mktemp -d -p /workspace)"; ${script}`, { timeout });
  expect(r.metadata.exit_code, r.output).toBe(0);
  return r.output;
}

describe("agent workloads under the filter", () => {
  it("the filter is in force in the slot", async () => {
    expect((await server.health()).json.seccomp).toBe("filter");
    expect((await server.bash(0, "awk '/^Seccomp:/{print $2}' /proc/self/status")).output).toBe("2");
  });

  it("bash, coreutils and tar", async () => {
    const out = await run(["bash", "tar", "gzip", "sort", "sha256sum"], [
      "mkdir -p d/e && seq 1 2000 > d/e/n.txt && cp -r d c && mv c m && ln -s m/e/n.txt l",
      "tar czf a.tgz d m l && mkdir x && tar xzf a.tgz -C x && cmp x/d/e/n.txt d/e/n.txt",
      "sort -rn d/e/n.txt | head -1; sha256sum x/l | cut -c1-8; stat -c %s x/m/e/n.txt; du -s x >/dev/null; date +%Y >/dev/null",
      "(sleep 0.1 & wait) ; echo $(( $(nproc) > 0 )); readlink l; touch -d '2020-01-01' t && ls -l --time-style=+%Y t | awk '{print $6}'",
    ].join("\n"));
    expect(out.split("\n")).toEqual(["2000", expect.stringMatching(/^[0-9a-f]{8}$/), "8893", "1", "m/e/n.txt", "2020"]);
  });

  it("git: init, commit, branch, merge, clone", async () => {
    const out = await run(["git"], [
      "git init -q -b main r && cd r && git config user.email a@b && git config user.name a",
      "echo 1 > f && git add f && git commit -qm one && git checkout -qb side && echo 2 >> f && git commit -qam two",
      "git checkout -q main && git merge -q side && git log --oneline | wc -l && cd .. && git clone -q r c && cat c/f | tr '\\n' ,",
    ].join("\n"));
    expect(out).toBe("2\n1,2,");
  });

  it("python3 with multiprocessing (a pool of processes, a queue, semaphores)", async () => {
    const out = await run(["python3"], `python3 - <<'PY'
import multiprocessing as mp
def sq(x): return x * x
if __name__ == "__main__":
    with mp.Pool(3) as p: print(sum(p.map(sq, range(100))))
    q = mp.Queue(); pr = mp.Process(target=q.put, args=("child",)); pr.start(); print(q.get()); pr.join()
    l = mp.Lock(); l.acquire(); l.release(); print(mp.get_start_method())
PY`);
    expect(out).toBe("328350\nchild\nfork");
  });

  it("pip: its version, and a local wheel installed without network", async () => {
    const out = await run(["python3", "pip"], [
      "pip --version | cut -d' ' -f1",
      `python3 - <<'PY'
import zipfile
with zipfile.ZipFile("probe_pkg-1.0-py3-none-any.whl", "w") as z:
    z.writestr("probe_pkg/__init__.py", "VALUE = 42\\n")
    z.writestr("probe_pkg-1.0.dist-info/METADATA", "Metadata-Version: 2.1\\nName: probe-pkg\\nVersion: 1.0\\n")
    z.writestr("probe_pkg-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\\nGenerator: test\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n")
    z.writestr("probe_pkg-1.0.dist-info/RECORD", "")
PY`,
      "pip install -q --no-index --disable-pip-version-check --target site probe_pkg-1.0-py3-none-any.whl",
      "PYTHONPATH=site python3 -c 'import probe_pkg; print(probe_pkg.VALUE)'",
    ].join("\n"));
    expect(out).toBe("pip\n42");
  });

  it("gcc and g++ (threads too), make", async () => {
    const out = await run(["gcc", "g++", "make"], [
      `cat > t.c <<'C'
#include <pthread.h>
#include <stdio.h>
static void *f(void *a) { return a; }
int main(void) { pthread_t t; void *r; pthread_create(&t, 0, f, (void *)7); pthread_join(t, &r); printf("c %ld\\n", (long)r); return 0; }
C`,
      `cat > t.cc <<'C'
#include <iostream>
#include <thread>
#include <vector>
int main() { std::vector<std::thread> v; int n[4] = {0}; for (int i = 0; i < 4; i++) v.emplace_back([&n, i] { n[i] = i; }); for (auto &t : v) t.join(); std::cout << "c++ " << n[0] + n[1] + n[2] + n[3] << std::endl; }
C`,
      "printf 'all: tc tcc\\ntc: t.c\\n\\tgcc -O1 -pthread -o tc t.c\\ntcc: t.cc\\n\\tg++ -O1 -pthread -o tcc t.cc\\n' > Makefile",
      "make -s -j2 && ./tc && ./tcc",
    ].join("\n"));
    expect(out).toBe("c 7\nc++ 6");
  });

  it("node and npm (npm init, a local package installed without network, a script; libuv falls back when io_uring is refused)", async () => {
    const out = await run(["node", "npm"], [
      "npm --version >/dev/null && mkdir lib && cd lib && npm init -y >/dev/null && echo 'module.exports = 42;' > index.js && npm pack -s >/dev/null && cd ..",
      "mkdir p && cd p && npm init -y >/dev/null && node -p 'require(\"./package.json\").name'",
      // Unpacked into node_modules (a tarball, not a link) and recorded as a dependency.
      "npm install --offline --no-audit --no-fund -s ../lib/lib-1.0.0.tgz && test -f node_modules/lib/index.js && node -p 'require(\"lib\") + \" \" + Object.keys(require(\"./package.json\").dependencies)'",
      "npm pkg set scripts.hi='echo hi-from-npm' && npm run -s hi",
      // UV_USE_IO_URING=1 asks libuv for io_uring, which the filter refuses: it must fall back.
      "UV_USE_IO_URING=1 node -e 'const fs=require(\"fs\");fs.promises.writeFile(\"x\",\"y\").then(()=>fs.promises.readFile(\"x\",\"utf8\")).then(console.log)'",
      "node -e 'const {execFileSync}=require(\"child_process\");const {Worker}=require(\"worker_threads\");console.log(execFileSync(\"echo\",[\"child\"]).toString().trim());new Worker(\"require(`worker_threads`).parentPort.postMessage(5)\",{eval:true}).on(\"message\",m=>console.log(m))'",
    ].join("\n"));
    expect(out).toBe("p\n42 lib\nhi-from-npm\ny\nchild\n5");
  });

  it("curl to a loopback server in the slot", async () => {
    const out = await run(["curl", "python3"], [
      "echo served > index.html",
      "python3 -m http.server 18777 --bind 127.0.0.1 >/dev/null 2>&1 &",
      "for i in $(seq 50); do curl -fsS --max-time 2 http://127.0.0.1:18777/index.html 2>/dev/null && break; sleep 0.1; done",
      "kill %1",
    ].join("\n"));
    expect(out).toBe("served");
  });

  it("strace and gdb (batch mode): ptrace is allowed", async () => {
    const out = await run(["strace", "gdb", "gcc"], [
      "strace -f -qq -e trace=execve -o tr.txt /bin/true && grep -c execve tr.txt",
      "printf 'int g(int x){return x*2;}\\nint main(void){return g(21)-42;}\\n' > p.c && gcc -g -O0 -o p p.c",
      "gdb -q -batch -ex 'break g' -ex run -ex bt -ex 'print x' -ex continue ./p 2>&1 | grep -E '^(#1 |\\$1 = )' | sed 's/ 0x[0-9a-f]* in / /' | cut -c1-12",
    ].join("\n"));
    expect(out).toBe("1\n#1  main () \n$1 = 21");
  });
});
