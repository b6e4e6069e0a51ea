import { spawn, type ChildProcess } from "node:child_process";
import { findExecutable } from "../../host/executables.js";
import { withoutCapabilities } from "../../host/mount-namespace.js";
import { SANDBOX_PATH } from "./isolation.js";
import { NET_READY_LINE, NET_SETUP, spawnSlirp4netns, type InternetAccess } from "./network.js";
import { applyEgress, egressScript, EgressRulesError } from "./egress-rules.js";
import type { EgressRules } from "../../protocol/egress.js";

/**
 * One network namespace per slot, shared by all its process sessions (issue 30), as in a VM:
 * a server one command starts on 127.0.0.1 (a `git daemon`, a dev server, a test fixture)
 * is reachable from the slot's other commands. Before, each session had a network namespace
 * of its own and such a server was unreachable.
 *
 * A holder process per slot (per network setting) owns the namespace: `unshare --user
 * --map-root-user --net` started as the slot's uid, then a shell that brings loopback up
 * (network off) or sets the slot's routes and DNS-only filter after slirp4netns links it
 * out (network on, network.ts: the same set-up a network-on command namespace gets), says
 * "up" and waits on stdin. Each session's sandbox joins it with `nsenter --user --net
 * --preserve-credentials --target <holder>` (allowed: the holder's user namespace belongs
 * to the same uid) and then bubblewrap makes its nested user namespace under the slot's uid,
 * exactly as under a network-on `unshare`. Nothing inside a slot can reach the holder (its
 * processes have their own PID namespace and no capability in the holder's namespaces).
 *
 * A slot whose root is an image (as root: a user namespace of its own, src/sandbox/images/):
 * the holder is made inside that namespace instead (`nsenter --user` into it, then `unshare
 * --net`), so the network namespace belongs to the slot's own user namespace, which its
 * sandboxes join with the holder's (`wrap`, the same nsenter): bubblewrap then runs as root of
 * that namespace, keeps only the capabilities it is told to (isolation.ts), and the image's
 * users stay who they are.
 *
 * Slots stay apart: each slot has its own holder, so its loopback is its own (a sibling
 * slot's 127.0.0.1 is another namespace; the host's is never reachable). The holders are
 * killed with the slot's sessions (reset, fork, kill of all processes): the next trajectory
 * gets a fresh namespace with nothing listening. A holder whose server dies ends too (its
 * stdin closes).
 */

/** The tools a shared namespace needs; when one is missing every session keeps a namespace of its own. */
export interface SharedNetnsTools {
  unshare: string;
  nsenter: string;
  ip: string;
}

export function probeSharedNetns(): { tools: SharedNetnsTools } | { reason: string } {
  const unshare = findExecutable("unshare");
  const nsenter = findExecutable("nsenter");
  const ip = findExecutable("ip");
  if (!unshare || !nsenter) return { reason: "unshare and nsenter (util-linux) are needed to share a slot's network namespace between its commands" };
  if (!ip) return { reason: "ip (iproute2) is needed to bring a shared network namespace's loopback up" };
  return { tools: { unshare, nsenter, ip } };
}

export class SlotNetnsError extends Error {
  override name = "SlotNetnsError";
  readonly code = "slot_netns_failed";
}

/** The last line the holder's shell prints once its namespace is ready for sessions. */
const UP_LINE = "slotpool-netns-ready\n";
/** Waits on stdin: the holder lives until it is killed or its server goes away. */
const WAIT = `printf 'slotpool-netns-ready\\n'; read -r _`;

/** One slot's network namespace (for one network setting). */
export class NetnsHolder {
  readonly ready: Promise<void>;
  private readonly child: ChildProcess;
  private slirp: ChildProcess | null = null;
  private exited = false;
  private readonly exit: Promise<void>;
  /** Ready, and the slot's egress rules in force: sessions join only past it (fail closed). */
  private gate: Promise<void>;

  constructor(
    private readonly tools: SharedNetnsTools,
    internet: InternetAccess | undefined,
    private readonly owner: { uid: number; gid: number } | undefined,
    place: (pid: number) => void,
    /** The slot's image user namespace (a descriptor of this process): the holder's namespace is made inside it. */
    usernsFd?: number,
    /** The slot's egress rules (network on only), applied before any session joins. */
    egress?: { nft: string; script: string },
  ) {
    const shell = internet
      ? ["/bin/sh", "-c", NET_SETUP, "slotpool-net", internet.routes.join("\n"), internet.dnsFilter, "/bin/sh", "-c", WAIT]
      : ["/bin/sh", "-c", `"$1" link set lo up || exit 97; ${WAIT}`, "slotpool-netns", tools.ip];
    const start =
      usernsFd !== undefined
        ? { file: tools.nsenter, args: ["--user=/proc/self/fd/3", "--preserve-credentials", "--", tools.unshare, "--net", "--", ...shell] }
        : withoutCapabilities(tools.unshare, ["--user", "--map-root-user", "--net", "--", ...shell]);
    const child = spawn(start.file, start.args, {
      stdio: ["pipe", "pipe", "pipe", ...(usernsFd !== undefined ? [usernsFd] : [])],
      env: { PATH: SANDBOX_PATH },
      cwd: "/",
      detached: true,
      ...(owner ? { uid: owner.uid, gid: owner.gid } : {}),
    });
    this.child = child;
    if (child.pid !== undefined) place(child.pid);
    for (const s of child.stdio) s?.on("error", () => undefined);
    this.exit = new Promise((resolve) => child.once("exit", () => resolve()));
    let err = "";
    let out = "";
    let nsUp = !internet;
    this.ready = new Promise<void>((resolve, reject) => {
      const fail = (why: string): void => {
        reject(new SlotNetnsError(`the slot's network namespace ${why}${err.trim() ? `: ${err.trim()}` : ""}`));
        this.kill();
      };
      const timer = setTimeout(() => fail("was not ready within 10 s"), 10_000);
      child.once("error", (e) => (clearTimeout(timer), fail(`could not start (${e.message})`)));
      child.once("exit", (code, signal) => {
        this.exited = true;
        this.killSlirp();
        clearTimeout(timer);
        fail(`ended (code ${code}, signal ${signal})`);
      });
      child.stdout!.setEncoding("utf8");
      child.stdout!.on("data", (d: string) => {
        out += d;
        if (out.includes(UP_LINE)) (clearTimeout(timer), resolve());
      });
      child.stderr!.setEncoding("utf8");
      child.stderr!.on("data", (d: string) => {
        err = (err + d).slice(-2000);
        // Network on: unshare made the namespace; slirp4netns links it out, then "go".
        if (!nsUp && internet && err.includes(NET_READY_LINE) && child.pid !== undefined) {
          nsUp = true;
          err = err.replace(NET_READY_LINE, "");
          const { child: slirp, ready } = spawnSlirp4netns(internet, child.pid, owner?.uid ?? process.getuid?.() ?? 0, owner?.gid ?? process.getgid?.() ?? 0);
          this.slirp = slirp;
          if (this.exited) this.killSlirp();
          ready.then(
            () => child.stdin!.write("go\n"),
            (e: unknown) => (clearTimeout(timer), fail(`got no slirp4netns (${e instanceof Error ? e.message : String(e)})`)),
          );
        }
      });
    });
    this.ready.catch(() => undefined);
    this.gate = egress ? this.ready.then(() => this.nft(egress.nft, egress.script)) : this.ready;
    this.gate.catch(() => this.kill());
  }

  /** Replaces the namespace's egress rules (after any earlier change); a failure ends the holder (its sessions with it). */
  setEgress(nft: string, script: string): Promise<void> {
    const run = this.gate.then(() => this.nft(nft, script));
    this.gate = run;
    run.catch(() => this.kill());
    return run;
  }

  private nft(nft: string, script: string): Promise<void> {
    if (this.exited || this.child.pid === undefined) return Promise.reject(new EgressRulesError("the slot's network namespace has ended"));
    return applyEgress({ nsenter: this.tools.nsenter, nft }, this.child.pid, this.owner, script);
  }

  get pid(): number | undefined {
    return this.child.pid;
  }

  get alive(): boolean {
    return !this.exited;
  }

  /**
   * `bwrapCmd` (bubblewrap without --unshare-net, with --uid/--gid) run inside this
   * namespace: a shell waits for "go" on stdin (written once the holder is ready, see
   * `ready`), then becomes nsenter, which becomes bubblewrap.
   */
  wrap(bwrapCmd: string[]): { file: string; args: string[] } {
    const gate = `read -r go && [ "$go" = go ] || exit 96; unset PWD OLDPWD; exec "$@"`;
    return { file: "/bin/sh", args: ["-c", gate, "slotpool-join", this.tools.nsenter, "--user", "--net", "--preserve-credentials", `--target=${this.child.pid}`, "--", ...bwrapCmd] };
  }

  /** Lets `child` (started with `wrap`) join once the holder is ready and its egress rules hold ("go" on its stdin); kills it if either fails. */
  join(child: ChildProcess): Promise<void> {
    const joined = this.gate.then(
      () => void child.stdin?.write("go\n"),
      (err: unknown) => {
        child.kill("SIGKILL");
        throw err;
      },
    );
    joined.catch(() => undefined);
    return joined;
  }

  kill(): void {
    this.killSlirp();
    if (this.exited || this.child.pid === undefined) return;
    try {
      process.kill(-this.child.pid, "SIGKILL");
    } catch {
      this.child.kill("SIGKILL");
    }
  }

  /** Kills the holder and resolves once it has exited (its namespace is gone once the slot's sessions are too). */
  async stop(): Promise<void> {
    this.kill();
    if (!this.exited && this.child.exitCode === null && this.child.signalCode === null) await this.exit;
  }

  private killSlirp(): void {
    const s = this.slirp;
    if (!s || s.exitCode !== null || s.signalCode !== null) return;
    try {
      s.kill("SIGKILL");
    } catch {
      /* gone */
    }
  }
}

/** Each slot's shared network namespaces (one per network setting), started on first use. */
export class SlotNetworks {
  private readonly holders = new Map<string, NetnsHolder>();
  /** Each slot's egress rules (protocol/egress.ts), kept until its reset: every network-on namespace of the slot gets them. */
  private readonly egress = new Map<number, EgressRules>();
  /** undefined: each session keeps a namespace of its own (`reason` says which tool is missing). */
  readonly tools: SharedNetnsTools | undefined;
  readonly reason: string | undefined;
  private readonly nftPath = findExecutable("nft");

  constructor() {
    const probe = probeSharedNetns();
    this.tools = "tools" in probe ? probe.tools : undefined;
    this.reason = "reason" in probe ? probe.reason : undefined;
  }

  /** Why egress rules cannot be enforced here, if they cannot. */
  get egressUnavailable(): string | undefined {
    if (!this.tools) return this.reason;
    return this.nftPath ? undefined : "nft (Debian: nftables) is not installed: egress rules cannot be enforced";
  }

  /**
   * Replaces the slot's egress rules: kept for the namespaces it starts later, and in force in
   * its live network-on namespace when this resolves. Throws EgressRulesError where they
   * cannot be enforced (and keeps none then).
   */
  async setEgress(slot: number, rules: EgressRules): Promise<void> {
    const empty = rules.allow.length === 0 && rules.deny.length === 0;
    const why = this.egressUnavailable;
    if (why && !empty) throw new EgressRulesError(why);
    if (empty) this.egress.delete(slot);
    else this.egress.set(slot, rules);
    const live = this.existing(slot, true);
    if (live && this.nftPath) await live.setEgress(this.nftPath, egressScript(rules));
  }

  /** The slot's rules (none: both lists empty). */
  egressOf(slot: number): EgressRules {
    return this.egress.get(slot) ?? { allow: [], deny: [] };
  }

  /** Forgets the slot's rules (its reset: the next trajectory starts without any). */
  forgetEgress(slot: number): void {
    this.egress.delete(slot);
  }

  /**
   * The slot's namespace for this setting (internet: network on), started when missing or
   * dead (inside the slot's image user namespace when `usernsFd` is given); undefined without
   * the tools.
   */
  holder(slot: number, internet: InternetAccess | undefined, owner: { uid: number; gid: number } | undefined, place: (pid: number) => void, usernsFd?: number): NetnsHolder | undefined {
    if (!this.tools) return undefined;
    const key = `${slot}:${internet !== undefined}:${usernsFd ?? ""}`;
    let h = this.holders.get(key);
    if (!h || !h.alive) {
      const rules = internet ? this.egress.get(slot) : undefined;
      h = new NetnsHolder(this.tools, internet, owner, place, usernsFd, rules && this.nftPath ? { nft: this.nftPath, script: egressScript(rules) } : undefined);
      this.holders.set(key, h);
    }
    return h;
  }

  /** The slot's live namespace for this setting (network on or off), if one was started; never starts one. */
  existing(slot: number, network: boolean): NetnsHolder | undefined {
    const key = `${slot}:${network}`;
    for (const [k, h] of this.holders) if ((k === key || k.startsWith(`${key}:`)) && h.alive) return h;
    return undefined;
  }

  /** Ends the slot's namespaces (after its sessions: nothing is left listening). */
  async stop(slot: number): Promise<void> {
    const mine = [...this.holders.entries()].filter(([k]) => k.startsWith(`${slot}:`));
    for (const [k] of mine) this.holders.delete(k);
    await Promise.all(mine.map(([, h]) => h.stop()));
  }
}
