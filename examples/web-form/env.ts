/**
 * web-form: a web task in the trajectory's own slot. `setupWorkspace` starts a small web app
 * (a workshop booking form, Node's http module, no dependencies) in the slot's terminal on the
 * slot's 127.0.0.1:8080; the model books a seat for the person the task names with the browser
 * tools; the reward reads the confirmation page in the same browser session the model used
 * (and the booking the app stored in the workspace).
 *
 * It ships an oracle policy that uses the browser tools the way a model does (navigate,
 * snapshot, then refs from the snapshot), so it runs without a model:
 *
 *   slotpool process examples/web-form/env.js
 *
 * Needs Chromium on the sandbox host (Debian's `chromium`; scripts/setup.sh and the sandbox
 * image install it) and `node` on the slots' PATH (the sandbox image's /usr/local/bin/node).
 * Written against slotpool's public API only.
 */
import { AgentEnv, type AgentEnvRuntime, type AgentResult, type OracleScript, type ToolContext } from "slotpool";

export interface Booking {
  id: number;
  name: string;
  email: string;
  plan: "basic" | "pro" | "team";
}

const PEOPLE = ["Ada Lovelace", "Alan Turing", "Grace Hopper", "Edsger Dijkstra", "Barbara Liskov", "Donald Knuth", "Frances Allen", "Ken Thompson"];
const PLANS: Booking["plan"][] = ["pro", "team", "basic"];
const PORT = 8080;
const SITE = `http://127.0.0.1:${PORT}/`;

/** The app, written into the workspace and run by the slot's terminal. */
const APP = String.raw`const http = require("node:http");
const fs = require("node:fs");
const port = Number(process.argv[2] || 8080);
const esc = (s) => String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
const page = (title, body) => "<!doctype html><html><head><meta charset=utf-8><title>" + title + "</title></head><body>" + body + "</body></html>";
const form = (errors) => page("Book a seat",
  "<h1>Book a workshop seat</h1>" + (errors.length ? "<ul role=alert>" + errors.map((e) => "<li>" + esc(e) + "</li>").join("") + "</ul>" : "") +
  "<form method=post action=/book>" +
  "<p><label>Full name <input name=name></label></p>" +
  "<p><label>Email <input name=email type=email></label></p>" +
  "<fieldset><legend>Plan</legend>" +
  ["basic", "pro", "team"].map((p) => "<label><input type=radio name=plan value=" + p + (p === "basic" ? " checked" : "") + "> " + p[0].toUpperCase() + p.slice(1) + "</label> ").join("") +
  "</fieldset>" +
  "<p><label><input type=checkbox name=terms value=yes> I accept the terms</label></p>" +
  "<button type=submit>Book seat</button></form>");
let next = 1001;
http.createServer((req, res) => {
  if (req.method === "POST" && req.url === "/book") {
    let body = "";
    req.on("data", (c) => { body += c; if (body.length > 65536) req.destroy(); });
    req.on("end", () => {
      const f = new URLSearchParams(body);
      const b = { name: (f.get("name") || "").trim(), email: (f.get("email") || "").trim(), plan: f.get("plan") || "", terms: f.get("terms") === "yes" };
      const errors = [];
      if (!b.name) errors.push("Enter your full name.");
      if (!/^[^@\s]+@[^@\s]+$/.test(b.email)) errors.push("Enter a valid email address.");
      if (!["basic", "pro", "team"].includes(b.plan)) errors.push("Choose a plan.");
      if (!b.terms) errors.push("Accept the terms to book.");
      if (errors.length) { res.writeHead(400, { "content-type": "text/html" }).end(form(errors)); return; }
      const ref = "WS-" + next++;
      const all = fs.existsSync("bookings.json") ? JSON.parse(fs.readFileSync("bookings.json", "utf8")) : [];
      all.push({ ref, name: b.name, email: b.email, plan: b.plan });
      fs.writeFileSync("bookings.json", JSON.stringify(all, null, 2));
      res.writeHead(200, { "content-type": "text/html" }).end(page("Booked", "<h1>Thanks, " + esc(b.name) + "!</h1><p>Plan: " + esc(b.plan) + ". Reference: " + ref + ".</p><p>A confirmation goes to " + esc(b.email) + ".</p>"));
    });
    return;
  }
  if (req.method === "GET" && (req.url === "/" || req.url === "/index.html")) { res.writeHead(200, { "content-type": "text/html" }).end(form([])); return; }
  res.writeHead(404, { "content-type": "text/plain" }).end("not found");
}).listen(port, "127.0.0.1", () => console.log("listening on " + port));
`;

/** The ref (`@e5`, `@f2e5`) of the first snapshot line matching `line`. */
function refOf(snapshot: string, line: RegExp): string {
  const m = snapshot.split("\n").find((l) => line.test(l))?.match(/\[ref=([a-z0-9]+)\]/);
  if (!m) throw new Error(`the page has no element matching ${line}:\n${snapshot}`);
  return `@${m[1]}`;
}

const cap = (p: string) => p[0]!.toUpperCase() + p.slice(1);

export default class WebFormEnv extends AgentEnv<Booking> {
  static override envName = "web-form";
  private next = 0;

  constructor(config: Record<string, unknown> = {}, runtime: AgentEnvRuntime = {}) {
    super(
      {
        groupSize: 2,
        totalGroups: 4,
        maxTurns: 16,
        tools: { enabled: ["default", "browser"] },
        systemPrompt:
          "You operate a web browser and a Linux workspace through tools. Read pages with browser_snapshot and act on elements by the refs it shows (@e5). When the task is done, reply with a short summary and no tool call.",
        ...config,
      },
      runtime,
    );
  }

  getNextItem(): Booking {
    const id = this.next++;
    const name = PEOPLE[id % PEOPLE.length]!;
    return { id, name, email: `${name.split(" ")[0]!.toLowerCase()}.${id}@example.org`, plan: PLANS[id % PLANS.length]! };
  }

  override async getEvalItems(): Promise<Booking[]> {
    return [0, 1, 2].map((i) => ({ ...this.getNextItem(), id: 1000 + i }));
  }

  buildTask(b: Booking): string {
    return `The booking site at ${SITE} runs in your workspace. Book one workshop seat for ${b.name} (email ${b.email}) on the ${cap(b.plan)} plan, accepting the terms, and make sure the booking is confirmed.`;
  }

  /** The app, started in the slot's terminal (its background job outlives the call; the browser shares the terminal's network). */
  override async setupWorkspace(_b: Booking, ctx: ToolContext): Promise<void> {
    await ctx.writeFile("app.cjs", APP);
    const started = await ctx.callTool("bash_stateful", {
      command: `node app.cjs ${PORT} > app.log 2>&1 &
for i in $(seq 200); do (exec 3<>/dev/tcp/127.0.0.1/${PORT}) 2>/dev/null && exit 0; sleep 0.1; done; echo "the app did not start:"; cat app.log; exit 1`,
      timeout: 60,
    });
    if (!started.success) throw new Error(`the booking app did not start in the slot: ${started.output || started.error}`);
  }

  /** 1 when the page the model left is the app's confirmation for this person and plan, and the app stored that booking. */
  async computeReward(b: Booking, _result: AgentResult, ctx: ToolContext): Promise<number> {
    const page = await ctx.browserSnapshot({ full: true });
    if (!page.ok || page.title !== "Booked") return 0;
    const confirmed = page.snapshot.includes(`Thanks, ${b.name}!`) && page.snapshot.includes(`Plan: ${b.plan}.`);
    const stored = await ctx.readFile("bookings.json");
    if (!stored.ok) return 0;
    const bookings = JSON.parse(stored.content) as Array<{ name: string; email: string; plan: string }>;
    const one = bookings.length === 1 && bookings[0]!.name === b.name && bookings[0]!.email === b.email && bookings[0]!.plan === b.plan;
    return confirmed && one ? 1 : 0;
  }

  /** What a model does: open the page, read it, fill it in by the snapshot's refs, submit, check the confirmation. */
  override oracle(b: Booking): OracleScript {
    let form = "";
    return ({ turn, messages }) => {
      const lastOutput = (): string => (JSON.parse(messages[messages.length - 1]?.content ?? "{}") as { output?: string }).output ?? "";
      switch (turn) {
        case 1:
          return { toolCalls: [{ name: "browser_navigate", arguments: { url: SITE } }] };
        case 2:
          return { toolCalls: [{ name: "browser_snapshot", arguments: {} }] };
        case 3:
          form = lastOutput();
          return {
            toolCalls: [
              { name: "browser_type", arguments: { ref: refOf(form, /textbox "Full name"/), text: b.name } },
              { name: "browser_type", arguments: { ref: refOf(form, /textbox "Email"/), text: b.email } },
              { name: "browser_click", arguments: { ref: refOf(form, new RegExp(`radio "${cap(b.plan)}"`)) } },
              { name: "browser_click", arguments: { ref: refOf(form, /checkbox "I accept the terms"/) } },
            ],
          };
        case 4:
          return { toolCalls: [{ name: "browser_click", arguments: { ref: refOf(form, /button "Book seat"/) } }] };
        case 5:
          return { toolCalls: [{ name: "browser_snapshot", arguments: {} }] };
        default:
          return { final: lastOutput().includes(`Thanks, ${b.name}!`) ? `Booked a ${b.plan} seat for ${b.name}.` : "The booking did not go through." };
      }
    };
  }
}
